// llama2.c checkpoint -> GGUF (work in progress).
