#!/usr/bin/env bash
# Regenerate tests/data/ppl_text.txt, the perplexity text: the verbatim GNU GPL v3
# followed by the verbatim GNU FDL v1.3, as shipped by Debian's base-files
# (/usr/share/common-licenses). Both licences say "Everyone is permitted to copy
# and distribute verbatim copies of this license document, but changing it is
# not allowed." Provenance: tests/data/ppl_text.SOURCE.md.
#
# Rerun (from the repo root):  bash scripts/goldens/make_ppl_text.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
L=/usr/share/common-licenses
echo "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986  $L/GPL-3" | sha256sum -c -
echo "110535522396708cea37c72a802c5e7e81391139f5f7985631c93ef242b206a4  $L/GFDL-1.3" | sha256sum -c -
cat "$L/GPL-3" "$L/GFDL-1.3" > tests/data/ppl_text.txt
wc -c tests/data/ppl_text.txt
sha256sum tests/data/ppl_text.txt
