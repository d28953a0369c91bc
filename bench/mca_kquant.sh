#!/usr/bin/env bash
# Static throughput (llvm-mca) of lilims' K-quant (Q4_K, Q5_K, Q6_K) and
# Q5_0 matmul loops beside llama.cpp's ggml_vec_dot_{q4_K,q5_K,q6_K}_q8_K
# and ggml_vec_dot_q5_0_q8_0, on NEON and on x86.
#
# Both sides are compiled to assembly by the same compiler with the flags of
# lilims' files (kernels/CMakeLists.txt): NEON with the aarch64 cross
# compiler, -march=armv8-a (plain) and armv8.2-a+dotprod (lilims' dotprod
# file also -fno-schedule-insns; llama.cpp's i8mm build adds +i8mm); x86 with
# -mavx2 -mfma -mf16c, and for AVX-512 VNNI those and -mavx512f -mavx512bw
# -mavx512vl -mavx512vnni.  llama.cpp is the pinned sdist
# (bench/mca_common.sh), compiled unmodified in a temp dir.
#
# The unit is one block of the weight type for one row and one token: a
# 256-weight super-block for the K-quants, a 32-weight block for Q5_0 (and
# for the Q8_0 / Q4_0 / Q4_1 loops of lilims' AVX-512 VNNI x16 file, also
# shown: the types K-quant and Q5_0 weights are converted to at load).
# cycles per unit = llvm-mca cycles per iteration / (rows x tokens x blocks
# that one iteration does).
#
# Regions (bench/mca_loops.awk): a loop as compiled, from its label to its
# back-edge.  When the loop over blocks holds one inner loop that GCC left
# rolled (lilims' plain-NEON 4-token tile: the token loop; llama.cpp's
# plain-NEON Q6_K and i8mm Q6_K: the j loop over halves of the super-block),
# the region is one outer iteration as executed: the outer body with the
# inner loop's body repeated its trip count (bench/mca_common.sh
# mca_flatten); llvm-mca sees branches as straight-line code either way.
#   lilims: the loop around each LILIMS_MCA_LOOP marker (kernels/
#     mca_marker.h) in a build with -DLILIMS_MCA_MARKERS; a rolled token
#     loop inside it runs `tokens` times (the marker's T, that loop's bound),
#     and must do one token's multiply-adds, the loop around it none.  The
#     marker is an asm statement, which GCC may compile around differently,
#     so the region analysed is the same loop in the build without markers
#     (what ships): the one with the same instructions (".L" numbers aside),
#     else, among the loops of the function with as many multiply-adds, the
#     one with the nearest instruction mix (mnemonics in any order; the row
#     says (*), a note gives the distance); a tie stops the script.
#   llama.cpp: in each function below, the loop whose multiply-adds are
#     exactly one iteration's work as the source writes it (e.g. a
#     super-block for 1 row x 1 token; q5_0's NEON loop does 2 blocks; the
#     i8mm paths 2 rows x 2 tokens), with the inner j loop run its source
#     trip count (QK_K/64 = 4 for Q4_K/Q5_K, QK_K/128 = 2 for Q6_K) when it
#     is rolled.  Exactly one such loop must exist.
# Multiply-adds are int8 products (SDOT 16, SMMLA 32, SMULL/SMLAL on 8-bit
# lanes 8; VPMADDUBSW / VPDPBUSD one per byte of the register), and each
# region must hold exactly unit x rows x tokens x blocks of them, times 2
# for lilims' x86 Q6_K, whose -32 offset is a second int8 dot of the
# activations (with 1s / 32s) per block and token (llama.cpp's takes the
# offset from Q8_K's block sums instead).  llvm-mca's messages are printed;
# any error, a marker not found in a loop or a count that does not match
# stops the script.
#
# Models: apple-a14, cortex-a76 (LLVM 14 has no A76 model: the Cortex-A57
# one), znver3 (AVX2 builds only: its model has no AVX-512), icelake-server
# (both x86 builds; LLVM 14 knows no znver4).
#
# Usage: bench/mca_kquant.sh [neon|x86|all] [llvm-mca binary]
#   LLAMACPP_SRC  llama.cpp source root (default: the sdist, bench/mca_common.sh)
#   CC_AARCH64, CXX_AARCH64, CC_X86, CXX_X86  the compilers
#   MCA_KEEP=1    keep the assembly and the regions (the directory is printed)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-all}
mca=${2:-$(command -v llvm-mca || command -v llvm-mca-14)}
cc_arm=${CC_AARCH64:-aarch64-linux-gnu-gcc}
cxx_arm=${CXX_AARCH64:-aarch64-linux-gnu-g++}
cc_x86=${CC_X86:-gcc}
cxx_x86=${CXX_X86:-g++}
case "$what" in neon | x86 | all) ;; *) echo "usage: $0 [neon|x86|all] [llvm-mca]" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
if [ -n "${MCA_KEEP:-}" ]; then echo "regions kept in $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi

# shellcheck source=bench/mca_common.sh
source "$root/bench/mca_common.sh"
llamacpp_source
inc=(-I"$llamacpp_src/ggml/include" -I"$llamacpp_src/ggml/src" -I"$llamacpp_src/ggml/src/ggml-cpu")
echo "llvm-mca: $("$mca" --version | grep -i 'version' | head -1 | sed 's/^ *//')" >&2

avx2="-mavx2 -mfma -mf16c"
vnni="$avx2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni"

# lilims: build <TAB> file under kernels/ <TAB> markers it must hold in
# loops (K-quants: 3 types x 4 and 1 tokens; Q5_0 AVX2: 4, 3, 2, 1 tokens;
# x16: 4 types x 1..8 tokens) <TAB> flags
lilims_neon="neon	arm/matmul_kquant_gemm_neon	6	-march=armv8-a
dotprod	arm/matmul_kquant_gemm_neon_dotprod	6	-march=armv8.2-a+dotprod -fno-schedule-insns"
lilims_x86="avx2	x86/matmul_kquant_gemm_avx2	6	$avx2
avx2	x86/matmul_q5_0_gemm_avx2	4	$avx2
avx512vnni	x86/matmul_kquant_gemm_avx512vnni	6	$vnni
avx512vnni	x86/matmul_gemm_x16_avx512vnni	32	$vnni"
# llama.cpp: build flags, then per function: type rows tokens blocks
# per iteration, and the inner loop's trip count ("-": none).
llama_builds_neon="neon	-march=armv8-a
dotprod	-march=armv8.2-a+dotprod
i8mm	-march=armv8.2-a+dotprod+i8mm"
llama_fns_neon="neon ggml_vec_dot_q4_K_q8_K Q4_K 1 1 1 4
neon ggml_vec_dot_q5_K_q8_K Q5_K 1 1 1 4
neon ggml_vec_dot_q6_K_q8_K Q6_K 1 1 1 2
neon ggml_vec_dot_q5_0_q8_0 Q5_0 1 1 2 -
dotprod ggml_vec_dot_q4_K_q8_K Q4_K 1 1 1 4
dotprod ggml_vec_dot_q5_K_q8_K Q5_K 1 1 1 4
dotprod ggml_vec_dot_q6_K_q8_K Q6_K 1 1 1 2
dotprod ggml_vec_dot_q5_0_q8_0 Q5_0 1 1 2 -
i8mm ggml_vec_dot_q4_K_q8_K Q4_K 2 2 1 4
i8mm ggml_vec_dot_q6_K_q8_K Q6_K 2 2 1 2"
llama_builds_x86="avx2	$avx2
avx512vnni	$vnni"
llama_fns_x86="avx2 ggml_vec_dot_q4_K_q8_K Q4_K 1 1 1 4
avx2 ggml_vec_dot_q5_K_q8_K Q5_K 1 1 1 4
avx2 ggml_vec_dot_q6_K_q8_K Q6_K 1 1 1 2
avx2 ggml_vec_dot_q5_0_q8_0 Q5_0 1 1 1 -
avx512vnni ggml_vec_dot_q4_K_q8_K Q4_K 1 1 1 4
avx512vnni ggml_vec_dot_q5_K_q8_K Q5_K 1 1 1 4
avx512vnni ggml_vec_dot_q6_K_q8_K Q6_K 1 1 1 2
avx512vnni ggml_vec_dot_q5_0_q8_0 Q5_0 1 1 1 -"

unit() { case "$1" in Q?_K) echo 256 ;; *) echo 32 ;; esac; }
norm() { sed -E 's/\.L[0-9]+/.L/g' "$1"; }
mnemonics() { awk '!/:$/ { print $1 }' "$1" | sort; }

# Candidate regions of function $2 in loop directory $1 (base x): its
# innermost loops, or with $3 = trips its two-level nests flattened; prints
# file <TAB> multiply-adds <TAB> first line <TAB> last line <TAB> forward
# branches inside.
candidates() {
  local dir=$1 want=$2 trips=$3 k fn first last macs fwd tag child cm cf
  if [ "$trips" = - ]; then
    while IFS=$'\t' read -r k fn first last macs fwd tag; do
      [ "$fn" = "$want" ] && printf '%s\t%d\t%d\t%d\t%d\n' "$dir/x.$k.s" "$macs" "$first" "$last" "$fwd"
    done < "$dir/x.index"
  else
    while IFS=$'\t' read -r k fn first last macs fwd tag child; do
      [ "$fn" = "$want" ] || continue
      cm=$(awk -F'\t' -v c="$child" '$1 == c { print $5 }' "$dir/x.index")
      cf=$(awk -F'\t' -v c="$child" '$1 == c { print $6 }' "$dir/x.index")
      mca_flatten "$dir/x.$k.pre.s" "$dir/x.$child.s" "$dir/x.$k.post.s" "$trips" > "$dir/x.$k.flat$trips.s"
      printf '%s\t%d\t%d\t%d\t%d\n' "$dir/x.$k.flat$trips.s" $((macs + trips * cm)) "$first" "$last" $((fwd + cf))
    done < "$dir/x.nest"
  fi
  return 0
}

# ", N calls" when region $1 calls out: llvm-mca does not see the callee and
# gives the call an assumed latency, so such a row is not a measure of the
# code that runs.
calls_in() {
  local c
  c=$(grep -cE '^(bl|blr|call[lq]?)[[:space:]]' "$1" || true)
  [ "$c" -eq 0 ] || echo ", $c call(s)"
}

fwd_note() {
  [ "$1" -eq 0 ] || echo "note: $2 has $1 forward branch(es) inside; llvm-mca runs them as straight-line code" >&2
}

# One table row: cycles per iteration and per unit on each model.
row() {
  local line=$1 region=$2 units=$3 cpus=$4 triple=$5 cpu cyc
  for cpu in $cpus; do
    if [ "$cpu" = - ]; then line="$line | - | -"; continue; fi
    cyc=$(mca_cycles "$region" "$cpu" "$triple")
    [ -n "$cyc" ] || { echo "no cycle count for $region on $cpu" >&2; exit 1; }
    line="$line | $cyc | $(awk -v c="$cyc" -v u="$units" 'BEGIN { printf "%.2f", c / u }')"
  done
  echo "$line |"
}

# The models of a build's columns ("-": the model cannot run it).
cpus_of() {
  case "$1" in
    neon | dotprod | i8mm) echo "apple-a14 cortex-a76" ;;
    avx2) echo "znver3 icelake-server" ;;
    avx512vnni) echo "- icelake-server" ;;
  esac
}

lilims_side() {  # arch cxx triple table
  local arch=$1 cxx=$2 triple=$3 build f want flags d b markers found kind k fn first last macs fwd tag child
  local name t rows tok kb units expect factor marked mmacs cm trips pick pfirst plast pfwd note
  local cf cmacs cfirst clast cfwd best tie dist
  while IFS=$'\t' read -r build f want flags; do
    b=$(basename "$f")
    d=$tmp/lilims.$b
    mkdir -p "$d/m" "$d/n"
    # shellcheck disable=SC2086  # flags: several words
    "$cxx" -std=c++17 -O3 -DNDEBUG $flags -DLILIMS_MCA_MARKERS -I"$root" -S -o "$d/m.s" "$root/kernels/$f.cpp"
    # shellcheck disable=SC2086
    "$cxx" -std=c++17 -O3 -DNDEBUG $flags -I"$root" -S -o "$d/n.s" "$root/kernels/$f.cpp"
    awk -v dir="$d/m" -v base=x -v arch="$arch" -f "$root/bench/mca_loops.awk" "$d/m.s"
    awk -v dir="$d/n" -v base=x -v arch="$arch" -f "$root/bench/mca_loops.awk" "$d/n.s"
    markers=$(grep -c 'LILIMS-MCA-LOOP' "$d/m.s" || true)
    found=0
    while IFS=$'\t' read -r kind k fn first last macs fwd tag child; do
      [ "$tag" != - ] || continue
      case "$tag" in *,*) echo "$b: one loop holds several markers ($tag)" >&2; exit 1 ;; esac
      found=$((found + 1))
      name=$(c++filt <<< "$fn")
      case "$name" in
        *BlockQ4_K*) t=Q4_K ;; *BlockQ5_K*) t=Q5_K ;; *BlockQ6_K*) t=Q6_K ;;
        *q5_0_q8_0_gemm__avx2*) t=Q5_0 ;;
        # The x16 file's other types: what Q4_K/Q5_K/Q6_K and Q5_0 become
        # where lilims converts them at load (kernels/matmul.h kept_at_load).
        *"quant::Type)6>"*) t=Q5_0 ;; *"quant::Type)8>"*) t=Q8_0 ;;
        *"quant::Type)2>"*) t=Q4_0 ;; *"quant::Type)3>"*) t=Q4_1 ;;
        *) echo "$b: no weight type in $name" >&2; exit 1 ;;
      esac
      rows=${tag##*rows=}; rows=${rows%% *}; tok=${tag##*tokens=}; tok=${tok%% *}; kb=${tag##*kblocks=}
      units=$((rows * tok * kb))
      factor=1
      [ "$arch" = x86 ] && [ "$t" = Q6_K ] && factor=2
      expect=$(($(unit "$t") * units * factor))
      if [ "$kind" = i ]; then
        marked=$d/m/x.$k.s; mmacs=$macs; trips=-
      else
        # The tile's token loop inside the block loop, rolled: `for (t < T)`,
        # so it runs `tokens` times; it must do one token's work and the
        # block loop around it none.
        trips=$tok
        cm=$(awk -F'\t' -v c="$child" '$1 == c { print $5 }' "$d/m/x.index")
        if [ "$macs" -ne 0 ] || [ "$cm" -ne $((expect / tok)) ]; then
          echo "$b loop $k ($tag, lines $first-$last): $macs int8 multiply-adds outside its inner loop and $cm inside, expected 0 and $((expect / tok))" >&2; exit 1
        fi
        marked=$d/m/x.$k.flat.s
        mca_flatten "$d/m/x.$k.pre.s" "$d/m/x.$child.s" "$d/m/x.$k.post.s" "$trips" > "$marked"
        mmacs=$((macs + trips * cm))
      fi
      if [ "$mmacs" -ne "$expect" ]; then
        echo "$b loop $k ($tag, lines $first-$last): $mmacs int8 multiply-adds, expected $expect" >&2; exit 1
      fi
      # The same loop without markers.
      pick=; note=
      while IFS=$'\t' read -r cf cmacs cfirst clast cfwd; do
        if cmp -s <(norm "$marked") <(norm "$cf"); then
          pick=$cf; pfirst=$cfirst; plast=$clast; pfwd=$cfwd; break
        fi
      done < <(candidates "$d/n" "$fn" "$trips")
      # Else, among the loops with as many multiply-adds, the one whose
      # instruction mix (mnemonics, in any order) is nearest; a tie stops.
      if [ -z "$pick" ]; then
        best=-1; tie=0
        while IFS=$'\t' read -r cf cmacs cfirst clast cfwd; do
          [ "$cmacs" -eq "$mmacs" ] || continue
          dist=$(diff <(mnemonics "$marked") <(mnemonics "$cf") | grep -c '^[<>]' || true)
          if [ "$best" -lt 0 ] || [ "$dist" -lt "$best" ]; then
            best=$dist; tie=0; pick=$cf; pfirst=$cfirst; plast=$clast; pfwd=$cfwd
          elif [ "$dist" -eq "$best" ]; then
            tie=1
          fi
        done < <(candidates "$d/n" "$fn" "$trips")
        if [ -z "$pick" ] || [ "$tie" -eq 1 ]; then
          echo "$b ($tag in $name): the marker changed the loop and no single loop without markers matches it" >&2; exit 1
        fi
        note=" (*)"
        echo "note: $b $t $tag: the marker changed the loop's code; analysed the loop without markers with as many multiply-adds and the nearest instruction mix ($best mnemonics differ)" >&2
      fi
      fwd_note "$pfwd" "$b $tag"
      row "| $build | lilims $t | $b.s lines $pfirst-$plast$note$(calls_in "$pick") | $rows x $tok x $kb" "$pick" "$units" "$(cpus_of "$build")" "$triple"
    done < <(awk -F'\t' '{ print "i\t" $0 "\t-" }' "$d/m/x.index"; awk -F'\t' '{ print "n\t" $0 }' "$d/m/x.nest")
    if [ "$found" -ne "$markers" ] || [ "$found" -ne "$want" ]; then
      echo "$b: $markers markers in the assembly, $found found in loops, $want expected" >&2; exit 1
    fi
  done <<< "$4"
}

llama_side() {  # arch cc triple builds fns quants.c
  local arch=$1 cc=$2 triple=$3 builds=$4 fns=$5 qc=$6 build flags d fb fn t rows tok bl trips expect n pick
  local pfirst plast pfwd cf cmacs cfirst clast cfwd units
  while IFS=$'\t' read -r build flags; do
    d=$tmp/llama.$arch.$build
    mkdir -p "$d"
    # shellcheck disable=SC2086
    "$cc" -O3 -DNDEBUG $flags "${inc[@]}" -S -o "$d.s" "$qc"
    awk -v dir="$d" -v base=x -v arch="$arch" -f "$root/bench/mca_loops.awk" "$d.s"
    while read -r fb fn t rows tok bl trips; do
      [ "$fb" = "$build" ] || continue
      units=$((rows * tok * bl))
      expect=$(($(unit "$t") * units))
      n=0; pick=
      while IFS=$'\t' read -r cf cmacs cfirst clast cfwd; do
        [ "$cmacs" -eq "$expect" ] || continue
        n=$((n + 1)); pick=$cf; pfirst=$cfirst; plast=$clast; pfwd=$cfwd
      done < <(candidates "$d" "$fn" -; [ "$trips" = - ] || candidates "$d" "$fn" "$trips")
      if [ "$n" -ne 1 ]; then
        echo "$fn ($build build): $n loops do $expect int8 multiply-adds per iteration, expected 1" >&2; exit 1
      fi
      fwd_note "$pfwd" "$fn ($build)"
      row "| $build | llama.cpp $t | ${fn#ggml_vec_dot_}: quants.s lines $pfirst-$plast$(calls_in "$pick") | $rows x $tok x $bl" "$pick" "$units" "$(cpus_of "$build")" "$triple"
    done <<< "$fns"
  done <<< "$builds"
}

head_row() {
  printf "| build | code | loop (as compiled) | rows x tokens x blocks per iteration | %s cyc/iter | cyc/block | %s cyc/iter | cyc/block |\n" "$1" "$2"
  printf "|---|---|---|---|---|---|---|---|\n"
}

if [ "$what" != x86 ]; then
  echo "NEON: $("$cxx_arm" --version | head -1)" >&2
  echo "NEON, cycles per block of one row x one token (Q4_K/Q5_K/Q6_K: 256 weights, the others: 32):"
  head_row apple-a14 cortex-a76
  lilims_side arm "$cxx_arm" aarch64 "$lilims_neon"
  llama_side arm "$cc_arm" aarch64 "$llama_builds_neon" "$llama_fns_neon" "$llamacpp_src/ggml/src/ggml-cpu/arch/arm/quants.c"
fi
if [ "$what" != neon ]; then
  echo "x86: $("$cxx_x86" --version | head -1)" >&2
  echo "x86, cycles per block of one row x one token (Q4_K/Q5_K/Q6_K: 256 weights, the others: 32):"
  head_row znver3 icelake-server
  lilims_side x86 "$cxx_x86" x86_64 "$lilims_x86"
  llama_side x86 "$cc_x86" x86_64 "$llama_builds_x86" "$llama_fns_x86" "$llamacpp_src/ggml/src/ggml-cpu/arch/x86/quants.c"
fi
