#!/usr/bin/env bash
# table.sh WORK TOTAL_SECS BUILD_SECS: the matrix's markdown tables (variants per need, results
# per kernel) from the TVTEST lines in WORK/*.results, as docs/kernels.md shows them.
set -euo pipefail
WORK=$1 TOTAL=${2:-?} BUILD=${3:-?}
files=()
for k in deb-6.1 deb-6.12 host; do [ -f "$WORK/$k.results" ] && files+=("$WORK/$k.results"); done
[ ${#files[@]} -gt 0 ] || { echo "(no results in $WORK)"; exit 0; }

field() { grep -a "^TVTEST $2" "$1" | tail -n 1 | cut -d' ' -f"$3"; }
# "agent=N mib=M" of a PASS/FAIL line, as N/M with a mark.
pair() {
  local l
  l=$(grep -a -E "^TVTEST (PASS|FAIL) $2 " "$1" | tail -n 1)
  [ -n "$l" ] || { echo "–"; return; }
  local a m
  a=$(sed -n 's/.*agent=\([0-9-]*\).*/\1/p' <<< "$l")
  m=$(sed -n 's/.*mib=\([0-9-]*\).*/\1/p' <<< "$l")
  case $l in "TVTEST PASS"*) echo "$a = $m";; *) echo "**$a ≠ $m**";; esac
}

echo "Variant each need used (\`tcpvigil check\`; *fallback* = not the first candidate):"
echo
printf '| need |'; for f in "${files[@]}"; do printf ' %s (%s) |' "$(field "$f" KERNEL 3)" "$(field "$f" KERNEL 4)"; done; echo
printf '|---|'; for _ in "${files[@]}"; do printf '%s' '---|'; done; echo
needs=$(grep -a -h '^TVTEST INFO variant ' "${files[@]}" | awk '{print $4}' | awk '!seen[$0]++')
for n in $needs; do
  printf '| %s |' "$n"
  for f in "${files[@]}"; do
    l=$(grep -a "^TVTEST INFO variant $n |" "$f" | tail -n 1 || true)
    v=$(cut -d'|' -f2 <<< "$l" | sed 's/^ *//; s/ *$//')
    how=$(cut -d'|' -f3 <<< "$l" | tr -d ' ')
    [ "$how" = fallback ] && v="$v *(fallback)*"
    printf ' %s |' "${v:-–}"
  done
  echo
done
echo
refusals=$(for f in "${files[@]}"; do
  grep -a '^TVTEST INFO variant .*| refused: ' "$f" | sed "s/^TVTEST INFO variant \([a-z_]*\) .*| refused: /- $(field "$f" KERNEL 3) \1: /" |
    sed 's/ (failed to load BPF skeleton[^)]*)//g'
done)
if [ -n "$refusals" ]; then
  echo "Refused candidates, with the kernel's answer:"
  echo
  echo "$refusals"
  echo
fi
echo "Results (agent = recording, mib = the namespace's /proc/net counters; sender side):"
echo
echo "| kernel | package | tests passed / failed | TcpRetransSegs | TCPLostRetransmit | TCPTimeouts | samples (sacktag) | SACK blocks vs capture | time |"
echo "|---|---|---|---|---|---|---|---|---|"
for f in "${files[@]}"; do
  k=$(field "$f" KERNEL 3)
  done_line=$(grep -a '^TVTEST DONE ' "$f" | tail -n 1 || true)
  np=$(cut -d' ' -f3 <<< "$done_line"); nf=$(cut -d' ' -f4 <<< "$done_line")
  nfail=$(grep -a -c '^TVTEST FAIL' "$f" || true)
  st="${np:-0} / ${nfail:-0}"
  [ -n "$done_line" ] || st="no DONE / ${nfail:-0}"
  samples=$(grep -a -E '^TVTEST (PASS|FAIL) datapath-samples-' "$f" | tail -n 1 | cut -d' ' -f4- || true)
  cap=$(grep -a -E '^TVTEST (PASS|FAIL) datapath-sack-vs-capture' "$f" | tail -n 1 |
    sed -n 's/.* \([0-9]*\) blocks on the wire.* \([0-9]*\) missed, \([0-9]*\) not on the wire.*/\1 on the wire, \2 missed, \3 invented/p' || true)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %ss |\n' "$k" "$(field "$f" KERNEL 5)" "$st" \
    "$(pair "$f" datapath-retrans-sender)" "$(pair "$f" datapath-lost-retrans-sender)" "$(pair "$f" datapath-rto-sender)" \
    "${samples:-–}" "${cap:-–}" "$(field "$f" TIME 3)"
done
echo
echo "Failures:"
grep -a -H '^TVTEST FAIL' "${files[@]}" | sed "s|^$WORK/||; s|\.results:TVTEST FAIL| |; s/^/- /" || echo "- none"
echo
echo "Matrix wall time: ${TOTAL}s, of which ${BUILD}s building (2 cores)."
