#!/usr/bin/env python3
"""A tiny random LLaVA-1.5 (CLIP vision tower + two-layer MLP projector + tiny llama), its two GGUFs
as llama.cpp's multimodal tooling lays them out, test images and goldens from HF transformers.

Rerun (from the repo root; pip install -r scripts/goldens/requirements-tiny-models.txt pillow;
about 20 s, most of it importing torch):

    python3 scripts/goldens/gen_tiny_llava.py     # writes tests/data/llava/

Versions used: torch 2.13.0+cpu, transformers 5.23.0, gguf 0.19.0, Pillow 13.0.0, numpy 2.4.6.
Output is deterministic for these versions (seeded torch generators, float64 goldens).

The model (LlavaForConditionalGeneration, LLaVA-1.5 settings):
- vision: CLIPVisionConfig, 56 px images, patch 14 (4 x 4 = 16 patches + the class token), hidden
  32, 2 heads, feed-forward 64, 3 layers, quick-GELU; features from hidden_states[-2] (the output
  of layer 1 of 0..2) without the class token ("default" strategy), as LLaVA-1.5.
- projector: linear (32 -> 64), GELU (erf), linear (64 -> 64).
- text: gen_tiny_models' llama shapes (hidden 64, 4 heads, 2 KV heads, 2 layers, vocabulary 512 =
  stories260K's tok512 SentencePiece), its own seeded weights.
- the image token is id 0 (<unk>, which no text of the prompt produces): HF replaces the rows of
  that id by the projected image features, so the prompt holds 16 of them.
Every weight with 2 or more dimensions is rounded to float16 first, so the F16 tensors of the
GGUFs are the model exactly; 1-D tensors are float32 values stored as F32.

Files (tests/data/llava/):
- text.gguf: the llama text model, exported by gen_tiny_models.export_gguf (llama.cpp's layout).
- mmproj.gguf: the vision tower and projector as llama.cpp's LLaVA image-encoder converter writes
  them (general.architecture "clip", clip.has_vision_encoder, clip.has_llava_projector,
  clip.projector_type "mlp", clip.use_gelu false = quick-GELU, clip.vision.* hyperparameters,
  image_mean / image_std; tensors v.patch_embd.weight (4-D conv kernel), v.class_embd,
  v.position_embd.weight, v.pre_ln.*, v.blk.N.{attn_q,attn_k,attn_v,attn_out,ln1,ln2,ffn_up,
  ffn_down}.*, mm.0.*, mm.2.*). As that converter does for a LLaVA projector, the vision layers
  after the feature layer are dropped and clip.vision.block_count says how many remain (2 of 3),
  and the unused post-LayerNorm is not written. ffn_up is fc1 (feed_forward_length rows) and
  ffn_down fc2, the names gguf-py's tensor map gives them.
- img_*.png: the test images (drawn here: gradients and shapes; one landscape, one portrait that
  is upscaled, one larger square that is downscaled).
- pixels_*.f32: HF's CLIPImageProcessorPil output for each image (PIL bicubic resize of the
  shortest side to 56, center crop 56 x 56, rescale 1/255, normalise), float32, (3, 56, 56)
  row-major: what the processor computes, in its own float32 arithmetic.
- embd_*.f32: the projector's output for each image, (16, 64) row-major, computed in float64 from
  those pixels and stored as float32.
- goldens.json: shapes, file names, the prompt's ids and HF's float64 logits for the prompt with
  the first image at the first image row, the first text row after the image and the last row;
  the float32 model's deviation from them (for deriving tolerances).

float64: the model is run with .double(); CLIP's eager attention computes its softmax in float32
whatever the dtype, and HF's llama RMSNorm and RoPE angles are float32 too, so those three are
replaced by float64 versions (attention_fp64 below; gen_tiny_models' Fp64RmsNorm and Fp64Rope).
"""

import copy
import json
import os
import sys

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn
from transformers import CLIPVisionConfig, LlamaForCausalLM, LlavaConfig, LlavaForConditionalGeneration
from transformers.image_utils import PILImageResampling
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.modeling_utils import AttentionInterface
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tiny_models as tiny  # noqa: E402

OUT = os.path.join(tiny.REPO, "tests", "data", "llava")
SEED = 9101
IMAGE_SIZE, PATCH = 56, 14
V_HIDDEN, V_HEADS, V_FF, V_LAYERS = 32, 2, 64, 3
FEATURE_LAYER = -2
IMAGE_TOKEN = 0
N_PATCHES = (IMAGE_SIZE // PATCH) ** 2
V_EPS = float(np.float32(1e-5))
# CLIP's (OpenAI) normalisation constants, as LLaVA-1.5's processor uses.
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]
PROMPT_BEFORE = "USER:"
PROMPT_AFTER = "\nWhat is in the picture? ASSISTANT:"


def make_images():
    """name -> PIL RGB image."""
    imgs = {}
    w, h = 72, 48  # landscape: shortest side 48 -> 56 (upscale), then a centre crop of the width
    a = np.zeros((h, w, 3), np.uint8)
    a[..., 0] = np.linspace(0, 255, w, dtype=np.float64)[None, :].round().astype(np.uint8)
    a[..., 1] = np.linspace(255, 0, h, dtype=np.float64)[:, None].round().astype(np.uint8)
    a[..., 2] = 96
    im = Image.fromarray(a, "RGB")
    d = ImageDraw.Draw(im)
    d.ellipse((20, 8, 52, 40), fill=(250, 240, 30))
    imgs["landscape"] = im
    w, h = 40, 90  # portrait: 40 -> 56 (upscale), 90 -> 126, crop the height
    im = Image.new("RGB", (w, h), (20, 30, 40))
    d = ImageDraw.Draw(im)
    for y in range(0, h, 10):
        d.rectangle((0, y, w - 1, y + 4), fill=(200, (y * 5) % 256, 60))
    d.polygon([(5, 80), (35, 80), (20, 50)], fill=(10, 200, 220))
    imgs["portrait"] = im
    n = 150  # square: 150 -> 56 (downscale, PIL's antialiasing filter support grows)
    yy, xx = np.mgrid[0:n, 0:n]
    b = np.zeros((n, n, 3), np.uint8)
    b[..., 0] = (((xx // 15) + (yy // 15)) % 2 * 220 + 20).astype(np.uint8)
    b[..., 1] = (xx * 255 // (n - 1)).astype(np.uint8)
    b[..., 2] = ((xx + yy) * 255 // (2 * n - 2)).astype(np.uint8)
    im = Image.fromarray(b, "RGB")
    ImageDraw.Draw(im).rectangle((40, 60, 110, 90), fill=(255, 255, 255), outline=(0, 0, 0))
    imgs["square"] = im
    return imgs


def make_config():
    vision = CLIPVisionConfig(hidden_size=V_HIDDEN, intermediate_size=V_FF, num_hidden_layers=V_LAYERS,
                              num_attention_heads=V_HEADS, image_size=IMAGE_SIZE, patch_size=PATCH,
                              hidden_act="quick_gelu", layer_norm_eps=V_EPS, projection_dim=tiny.HIDDEN)
    text = tiny.make_config("llama")
    return LlavaConfig(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN,
                       projector_hidden_act="gelu", vision_feature_layer=FEATURE_LAYER,
                       vision_feature_select_strategy="default", image_seq_length=N_PATCHES,
                       tie_word_embeddings=False)


def build_model():
    model = LlavaForConditionalGeneration(make_config()).float().eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() >= 2:
                std = tiny.HEAD_STD if name == "lm_head.weight" else tiny.WEIGHT_STD
                p.copy_((noise * std).half().float())
            elif name.endswith("bias") or name.endswith("class_embedding"):
                p.copy_(noise * tiny.BIAS_STD if name.endswith("bias") else noise * tiny.WEIGHT_STD)
            else:
                p.copy_(1.0 + noise * tiny.NORM_STD)
    return model


def attention_fp64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention with the softmax in the tensors' dtype (float64); GQA as HF's repeat_kv."""
    rep = getattr(module, "num_key_value_groups", 1)
    key = key.repeat_interleave(rep, dim=1)
    value = value.repeat_interleave(rep, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs


AttentionInterface.register("lilims_fp64_llava", attention_fp64)
# The causal mask of the text model, additive (0 / dtype min), as eager attention takes it.
AttentionMaskInterface.register("lilims_fp64_llava", eager_mask)


def to_fp64(model):
    """A float64 copy with its own config (the attention choice is written into the config, and
    the float32 model must keep HF's own)."""
    m = LlavaForConditionalGeneration(copy.deepcopy(model.config)).to(torch.float64).eval()
    m.load_state_dict({k: v.to(torch.float64) for k, v in model.state_dict().items()})
    m.set_attn_implementation("lilims_fp64_llava")
    lm = m.model.language_model
    for name, mod in list(lm.named_modules()):
        if type(mod).__name__.endswith("RMSNorm"):
            parent = lm.get_submodule(name.rsplit(".", 1)[0]) if "." in name else lm
            setattr(parent, name.rsplit(".", 1)[-1], tiny.Fp64RmsNorm(mod.weight, mod.variance_epsilon))
    lm.rotary_emb = tiny.Fp64Rope(m.config.text_config)
    return m


def text_model(model):
    """The language model and head as a LlamaForCausalLM (for gen_tiny_models.export_gguf)."""
    lm = LlamaForCausalLM(model.config.text_config).float().eval()
    state = {"model." + k: v for k, v in model.model.language_model.state_dict().items()}
    state["lm_head.weight"] = model.lm_head.weight
    lm.load_state_dict(state)
    return lm


def export_mmproj(model, path):
    v = model.config.vision_config
    w = gguf.GGUFWriter(path, "clip")
    w.add_name("lilims tiny random LLaVA projector")
    w.add_description("image encoder for LLaVA")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_bool("clip.has_text_encoder", False)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_llava_projector", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", v.hidden_act == "gelu")
    w.add_uint32("clip.vision.image_size", v.image_size)
    w.add_uint32("clip.vision.patch_size", v.patch_size)
    w.add_uint32("clip.vision.embedding_length", v.hidden_size)
    w.add_uint32("clip.vision.feed_forward_length", v.intermediate_size)
    w.add_uint32("clip.vision.projection_dim", v.projection_dim)
    w.add_uint32("clip.vision.attention.head_count", v.num_attention_heads)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", v.layer_norm_eps)
    n_kept = v.num_hidden_layers + 1 + FEATURE_LAYER  # hidden_states[-2] = after layer n-2
    w.add_uint32("clip.vision.block_count", n_kept)
    w.add_array("clip.vision.image_mean", MEAN)
    w.add_array("clip.vision.image_std", STD)

    state = {k: t.detach().to(torch.float32).numpy() for k, t in model.state_dict().items()}
    vt = "model.vision_tower."

    def put(name, a):
        w.add_tensor(name, a.astype(np.float16) if a.ndim >= 2 else a.astype(np.float32))

    put("v.class_embd", state[vt + "embeddings.class_embedding"])
    put("v.patch_embd.weight", state[vt + "embeddings.patch_embedding.weight"])
    put("v.position_embd.weight", state[vt + "embeddings.position_embedding.weight"])
    for t in ("weight", "bias"):
        put(f"v.pre_ln.{t}", state[vt + f"pre_layrnorm.{t}"])
    for b in range(n_kept):
        hf = vt + f"encoder.layers.{b}."
        for t in ("weight", "bias"):
            put(f"v.blk.{b}.attn_q.{t}", state[hf + f"self_attn.q_proj.{t}"])
            put(f"v.blk.{b}.attn_k.{t}", state[hf + f"self_attn.k_proj.{t}"])
            put(f"v.blk.{b}.attn_v.{t}", state[hf + f"self_attn.v_proj.{t}"])
            put(f"v.blk.{b}.attn_out.{t}", state[hf + f"self_attn.out_proj.{t}"])
            put(f"v.blk.{b}.ln1.{t}", state[hf + f"layer_norm1.{t}"])
            put(f"v.blk.{b}.ln2.{t}", state[hf + f"layer_norm2.{t}"])
            put(f"v.blk.{b}.ffn_up.{t}", state[hf + f"mlp.fc1.{t}"])
            put(f"v.blk.{b}.ffn_down.{t}", state[hf + f"mlp.fc2.{t}"])
    for i, hf in ((0, "linear_1"), (2, "linear_2")):
        for t in ("weight", "bias"):
            put(f"mm.{i}.{t}", state[f"model.multi_modal_projector.{hf}.{t}"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def processor():
    return CLIPImageProcessorPil(do_resize=True, size={"shortest_edge": IMAGE_SIZE},
                                 resample=PILImageResampling.BICUBIC, do_center_crop=True,
                                 crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
                                 do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                                 image_mean=MEAN, image_std=STD, do_convert_rgb=True)


def prompt_ids(sp):
    """BOS, the text before the marker, one image token per patch, the text after it; each text
    piece tokenized on its own (as llama.cpp's mtmd tokenizes the pieces around a media marker)."""
    return ([tiny.BOS] + sp.encode(PROMPT_BEFORE) + [IMAGE_TOKEN] * N_PATCHES + sp.encode(PROMPT_AFTER))


def run(model, ids, pixels):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), pixel_values=pixels, use_cache=False).logits[0]


def image_features(model, pixels):
    with torch.no_grad():
        return model.model.get_image_features(pixel_values=pixels, vision_feature_layer=FEATURE_LAYER,
                                              vision_feature_select_strategy="default").pooler_output[0]


def main():
    import sentencepiece as spm
    os.makedirs(OUT, exist_ok=True)
    sp = spm.SentencePieceProcessor(model_file=tiny.DEFAULT_TOKENIZER)
    model = build_model()
    model64 = to_fp64(model)
    tiny.export_gguf("llama", text_model(model), sp, os.path.join(OUT, "text.gguf"))
    export_mmproj(model, os.path.join(OUT, "mmproj.gguf"))

    proc = processor()
    goldens = {"image_size": IMAGE_SIZE, "patch_size": PATCH, "n_patches": N_PATCHES,
               "n_embd_text": tiny.HIDDEN, "image_mean": MEAN, "image_std": STD,
               "image_token": IMAGE_TOKEN, "images": []}
    all_pixels = {}
    for name, im in make_images().items():
        im.save(os.path.join(OUT, f"img_{name}.png"), optimize=True)
        im = Image.open(os.path.join(OUT, f"img_{name}.png")).convert("RGB")
        px = proc(images=im, return_tensors="pt")["pixel_values"]  # (1, 3, 56, 56) float32
        assert px.dtype == torch.float32 and tuple(px.shape) == (1, 3, IMAGE_SIZE, IMAGE_SIZE)
        all_pixels[name] = px
        px.numpy().astype("<f4").tofile(os.path.join(OUT, f"pixels_{name}.f32"))
        e64 = image_features(model64, px.to(torch.float64))
        e32 = image_features(model, px)
        assert tuple(e64.shape) == (N_PATCHES, tiny.HIDDEN)
        e64.numpy().astype("<f4").tofile(os.path.join(OUT, f"embd_{name}.f32"))
        goldens["images"].append({
            "name": name, "png": f"img_{name}.png", "width": im.width, "height": im.height,
            "pixels": f"pixels_{name}.f32", "embd": f"embd_{name}.f32",
            "embd_max_abs": float(e64.abs().max()),
            "embd_fp32_max_abs_diff": float((e32.double() - e64).abs().max())})

    ids = prompt_ids(sp)
    first_img = ids.index(IMAGE_TOKEN)
    positions = [first_img, first_img + N_PATCHES, len(ids) - 1]
    px = all_pixels["landscape"]
    l64 = run(model64, ids, px.to(torch.float64))
    l32 = run(model, ids, px)
    goldens["prompt"] = {"image": "landscape", "text_before": PROMPT_BEFORE, "text_after": PROMPT_AFTER,
                         "ids": ids, "positions": positions,
                         "logits": [[float(x) for x in l64[p]] for p in positions],
                         "fp32_max_abs_diff": float((l32.double() - l64)[positions].abs().max())}
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump(goldens, f, indent=1)
        f.write("\n")
    for name in sorted(os.listdir(OUT)):
        print(f"{name}: {os.path.getsize(os.path.join(OUT, name))} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
