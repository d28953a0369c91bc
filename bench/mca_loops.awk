# Finds the innermost loops of every function in a GCC -S file (aarch64, or
# x86-64 AT&T with -v arch=x86) and writes each loop, exactly as compiled,
# as an llvm-mca input.
# Shared by bench/mca_neon.sh, bench/mca_llamacpp_neon.sh and
# bench/mca_kquant.sh.
#
# A loop is a backward branch: a branch (b, b.cond / bcc, cbz, cbnz, tbz,
# tbnz; x86: jmp, jcc) whose target label (".L5", or "3" as "3b" in inline
# asm) is defined earlier in the same function.  Its region runs from that
# label to the last branch back to it, so it holds the whole body as laid
# out, the pointer increments, the compare and the back-edge itself.  A
# loop is innermost when no other loop lies inside it.  Forward branches
# inside a region are kept (llvm-mca sees them as straight-line code; the
# driver scripts report them).
# One respelling: byte-lane MOVI immediates as LLVM writes them (below).
#
# Usage: awk -v dir=OUT -v base=NAME [-v arch=x86] -f mca_loops.awk FILE.s
# Writes, per innermost loop k of function f (k counts from 1 in address
# order over the whole file), dir/base.k.s (its labels and instructions) and one line
# in dir/base.index:
#   k <TAB> function (as in the file) <TAB> first line <TAB> last line
#     <TAB> int8 multiply-adds per iteration <TAB> forward branches inside
#     <TAB> marker tag ("-" when none)
# Multiply-adds: SDOT/UDOT (lane-indexed or not) 16, SMMLA/UMMLA 32,
# SMULL/SMLAL (and the "2" forms) on 8-bit lanes 8; x86 VPMADDUBSW and
# VPDPBUSD(S), one per byte of the register: xmm 16, ymm 32, zmm 64.  A
# marker is an asm comment "LILIMS-MCA-LOOP <tag>" (kernels/mca_marker.h)
# placed inside a loop body.
#
# Two-level nests: a loop whose only inner loop is one innermost loop C
# (a loop over super-blocks around a loop that runs a fixed number of times
# per super-block) is written too, as dir/base.nK.pre.s (from its label to
# C's label) and dir/base.nK.post.s (after C's back-edge to its own), with
# one line in dir/base.nest:
#   nK <TAB> function <TAB> first line <TAB> last line <TAB> multiply-adds
#     outside C <TAB> forward branches outside C <TAB> marker tag outside C
#     <TAB> C's k
# bench/mca_common.sh's mca_flatten joins pre, C's region repeated and post
# into one iteration of the outer loop as executed.

function flush_function(    i, j, k, L, inner, t, tag, macs, fwd, nm, out, m) {
  if (fn == "") return
  # Loops: label -> last back-edge to it.
  nloops = 0
  for (i = 1; i <= n; i++) {
    if (!(i in target)) continue
    t = target[i]
    j = 0
    if (t ~ /^[0-9]+b$/) {  # numeric local label, backward: nearest definition before i
      nm = substr(t, 1, length(t) - 1)
      for (k = i - 1; k >= 1; k--) if ((k in label) && label[k] == nm) { j = k; break }
    } else if (t in labelline) {
      j = labelline[t]
      if (j >= i) j = 0
    }
    if (j == 0) continue
    isback[i] = 1
    if (j in loopend) { if (i > loopend[j]) loopend[j] = i }
    else { loopend[j] = i; loopstart[++nloops] = j }
  }
  for (L = 1; L <= nloops; L++) {
    s = loopstart[L]; e = loopend[s]
    inner = 1
    for (m = 1; m <= nloops; m++) {
      if (m == L) continue
      s2 = loopstart[m]; e2 = loopend[s2]
      if (s2 >= s && e2 <= e && !(s2 == s && e2 == e)) { inner = 0; break }
    }
    if (!inner) continue
    macs = 0; fwd = 0; tag = "-"
    idx++
    out = dir "/" base "." idx ".s"
    printf "" > out
    for (i = s; i <= e; i++) {
      if (i in marker) tag = (tag == "-") ? marker[i] : tag "," marker[i]
      if ((i in label) && label[i] != "") print label[i] ":" > out  # "bgt 3b" needs its "3:"
      if (!(i in insn)) continue
      print insn[i] > out
      macs += mac[i]
      if ((i in target) && i != e && !(i in isback)) fwd++
    }
    close(out)
    printf "%d\t%s\t%d\t%d\t%d\t%d\t%s\n", idx, fn, lineno[s], lineno[e], macs, fwd, tag > (dir "/" base ".index")
    inneridx[L] = idx
  }
  # Two-level nests: loops holding exactly one loop, itself innermost.
  for (L = 1; L <= nloops; L++) {
    if (L in inneridx) continue
    s = loopstart[L]; e = loopend[s]
    c = 0; nin = 0
    for (m = 1; m <= nloops; m++) {
      if (m == L) continue
      s2 = loopstart[m]; e2 = loopend[s2]
      if (s2 >= s && e2 <= e) { nin++; c = m }
    }
    if (nin != 1 || !(c in inneridx)) continue
    cs = loopstart[c]; ce = loopend[cs]
    nidx++
    macs = 0; fwd = 0; tag = "-"
    for (part = 0; part < 2; part++) {
      out = dir "/" base ".n" nidx (part ? ".post.s" : ".pre.s")
      printf "" > out
      from = part ? ce + 1 : s; to = part ? e : cs - 1
      for (i = from; i <= to; i++) {
        if (i in marker) tag = (tag == "-") ? marker[i] : tag "," marker[i]
        if ((i in label) && label[i] != "") print label[i] ":" > out
        if (!(i in insn)) continue
        print insn[i] > out
        macs += mac[i]
        if ((i in target) && i != e && !(i in isback)) fwd++
      }
      close(out)
    }
    printf "n%d\t%s\t%d\t%d\t%d\t%d\t%s\t%d\n", nidx, fn, lineno[s], lineno[e], macs, fwd, tag, inneridx[c] > (dir "/" base ".nest")
  }
  delete insn; delete label; delete labelline; delete target; delete marker; delete mac
  delete loopend; delete loopstart; delete lineno; delete isback; delete inneridx
  n = 0
}

BEGIN {
  fn = ""; n = 0; idx = 0; nidx = 0; bad = 0
  x86 = (arch == "x86")
  printf "" > (dir "/" base ".index"); printf "" > (dir "/" base ".nest")
}

{
  line = $0
  # A function starts at its global label and ends at .size.
  if (line ~ /^[A-Za-z_][A-Za-z0-9_.$]*:[ \t]*$/ && line !~ /^\.L/) {
    flush_function(); fn = line; sub(/:.*/, "", fn); next
  }
  if (line ~ /^[ \t]*\.size[ \t]/) { flush_function(); fn = ""; next }
  if (fn == "") next
  n++
  lineno[n] = NR
  if (line ~ /LILIMS-MCA-LOOP/) { t = line; sub(/.*LILIMS-MCA-LOOP[ \t]*/, "", t); marker[n] = t; next }
  # Labels, possibly followed by an instruction ("3:ldr q3, [x28]" in inline asm).
  while (match(line, /^[ \t]*(\.L[A-Za-z0-9_.$]+|[0-9]+):/)) {
    l = substr(line, RSTART, RLENGTH); gsub(/[ \t:]/, "", l)
    label[n] = l; labelline[l] = n
    line = substr(line, RSTART + RLENGTH)
  }
  # Hand-encoded instructions in inline asm (".inst 0x4f9fe18a  // sdot ...",
  # for assemblers without dotprod): llvm-mca skips directives, so the
  # instruction is taken from the comment; dir/base.inst lists each pair for
  # the caller to check the encoding.
  if (line ~ /^[ \t]*\.inst[ \t]/) {
    if (line !~ /\/\/[ \t]*[a-z]/) { print "mca_loops.awk: .inst without a decoded comment at line " NR ": " $0 > "/dev/stderr"; bad = 1; next }
    hex = line; sub(/^[ \t]*\.inst[ \t]+/, "", hex); sub(/[ \t\/].*/, "", hex)
    sub(/^[^\/]*\/\/[ \t]*/, "", line)
    printf "%s\t%s\n", hex, line > (dir "/" base ".inst")
  }
  sub(/\/\/.*/, "", line)
  if (x86) sub(/#.*/, "", line)
  if (line ~ /^[ \t]*$/ || line ~ /^[ \t]*[#.]/) next
  sub(/^[ \t]+/, "", line); sub(/[ \t]+$/, "", line)
  op = line; sub(/[ \t].*/, "", op); op = tolower(op)
  if (op ~ /^\{/) { op = line; sub(/^\{[a-z0-9]*\}[ \t]*/, "", op); sub(/[ \t].*/, "", op); op = tolower(op) }  # {vex} vpdpbusd
  # GNU as takes a byte-lane MOVI immediate written as the sign-extended
  # 64-bit value GCC prints ("movi v1.16b, 0xfffffffffffffff0"); LLVM wants
  # the byte itself (0xf0): the same instruction, respelled.
  if (op == "movi" && tolower(line) ~ /\.(8|16)b,[ \t]*0xffffffffffffff[0-9a-f][0-9a-f]$/) {
    sub(/0x[fF][fF][fF][fF][fF][fF][fF][fF][fF][fF][fF][fF][fF][fF]/, "0x", line)
  }
  insn[n] = line
  if ((!x86 && op ~ /^(b|b\.[a-z][a-z]|b(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le)|cbn?z|tbn?z)$/) ||
      (x86 && op ~ /^j[a-z]+$/)) {
    t = line; sub(/.*[ ,\t]/, "", t); target[n] = t
  }
  if (x86) {
    if (op ~ /^vpmaddubsw$/ || op ~ /^vpdpbusds?$/) mac[n] = line ~ /%zmm/ ? 64 : line ~ /%ymm/ ? 32 : 16
  } else if (op ~ /^[su]dot$/) mac[n] = 16
  else if (op ~ /^[su]mmla$/ || op == "usmmla") mac[n] = 32
  else if (op ~ /^[su]m(ul|la)l2?$/ && line ~ /\.8b|\.16b/) mac[n] = 8
}

END { flush_function(); if (bad) exit 1 }
