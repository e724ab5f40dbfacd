# lib.sh — what the integration scripts (tests/it_*.sh) share; each sources it first:
#   . "$(dirname "$0")/lib.sh" NAME TAG
# It makes the repository root the working directory and sets $root, $BUILD, $bin (the
# tpuflow binary: the script ends, exit 1, when it is not built), $dir (a new directory
# /tmp/tpuflow-it-TAG.XXXXXX, removed on exit with the daemon start_daemon started; a script
# that starts other processes sets its own EXIT trap, which removes it too) and $H (a state
# home in it), and defines fail, expect, latest, start_daemon and csv_data. NAME prefixes every message.
set -uo pipefail
it_name=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
BUILD=${BUILD:-build}
bin=$root/$BUILD/tpuflow
[[ -x $bin ]] || { echo "$it_name: build first (make)"; exit 1; }
dir=$(mktemp -d "/tmp/tpuflow-it-$2.XXXXXX")
H=$dir/home
dpid= # the daemon start_daemon started and the script has not stopped (it clears dpid)
it_cleanup() {
  [[ -n $dpid ]] && kill -KILL "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
  rm -rf "$dir"
}
trap it_cleanup EXIT

# Ends the script as failed, saying why (and the daemon's last lines when it logged to d.log).
fail() {
  echo "$it_name: FAILED: $*"
  [[ -f $dir/d.log ]] && tail -20 "$dir/d.log"
  exit 1
}

# expect CODE WORDS -- CMD...: CMD exits CODE and (WORDS not empty) says WORDS on stdout or
# stderr.
expect() {
  local code=$1 words=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  [[ $rc == "$code" ]] || fail "'$*' exited $rc, expected $code: $out"
  [[ -z $words ]] || grep -qF -- "$words" <<<"$out" || fail "'$*' did not say '$words': $out"
}

# The id of the newest run of the home $H.
latest() {
  "$bin" runs list --home "$H" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])'
}

# start_daemon [ARG...]: `tpuflow daemon` on $H, a free loopback port, no auth, ARGs added,
# logging to $dir/d.log, in the background as $dpid; returns when its daemon.json names it.
start_daemon() {
  "$bin" daemon --home "$H" --listen 127.0.0.1:0 --auth none "$@" >>"$dir/d.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 200); do
    [[ -s $H/daemon.json ]] && grep -q "\"pid\": $dpid" "$H/daemon.json" && return 0
    sleep 0.05
  done
  fail "the daemon did not start"
}

# csv_data FILE: the 4,000-row two-class CSV (columns a-d and label) the short trainings read,
# the same bytes every time (awk's srand(3)), so that a training's weights can be compared
# with those of another run on it.
csv_data() {
  awk 'BEGIN { srand(3); print "a,b,c,d,label";
    for (i = 0; i < 4000; i++) { a = rand(); b = rand(); c = rand(); d = rand();
      print a "," b "," c "," d "," ((a + b > c + d) ? 1 : 0) } }' >"$1"
}
