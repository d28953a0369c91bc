// llama2.c converter tests: see below (added with the converter).
