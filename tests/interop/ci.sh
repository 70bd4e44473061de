#!/usr/bin/env bash
# CI entry point for the interop suite (called by .ci/run): installs the host tools, builds or
# reuses the cached guest (Linux siw + rxe + rdma-core in QEMU), and runs the interop Go tests
# with SOFTRNIC_INTEROP=1. Exits non-zero on any failure; every step has a timeout.
# The results table is written to tests/interop/.cache/results.md.
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
export PATH="$PATH:/usr/local/go/bin"
CACHE=${SOFTRNIC_INTEROP_CACHE:-$HERE/.cache}
export SOFTRNIC_INTEROP_CACHE=$CACHE
t0=$(date +%s)

# Kill whatever QEMU the harness started and left behind, by the pid it recorded, and delete
# that namespace. A record is left behind only when the test process that owns it is gone
# (another run may share this cache right now); the pid must still be a qemu-system process.
cleanup() {
	local f pid ns owner
	for f in "$CACHE"/run/*.pid; do
		[ -e "$f" ] || continue
		pid=$(basename "$f" .pid)
		read -r ns owner <"$f" || true
		if [ -n "${owner:-}" ] && [ -d "/proc/$owner" ]; then
			continue # its test process is alive: not ours to touch
		fi
		if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q "qemu-system-x86_64"; then
			echo "interop ci: killing leftover qemu pid $pid (netns $ns)"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		case "$ns" in srnic-*) ip netns del "$ns" 2>/dev/null || true ;; esac
		rm -f "$f"
	done
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then
	echo "###############################################################################"
	echo "## INTEROP SUITE SKIPPED: not root (needs apt-get, network namespaces and taps)"
	echo "###############################################################################"
	exit 0
fi
cleanup

echo "== interop: guest image (build-guest.sh)"
timeout 900 bash "$HERE/build-guest.sh"
echo "== interop: go test (SOFTRNIC_INTEROP=1)"
cd "$HERE/../.."
set +e
SOFTRNIC_INTEROP=1 timeout 1380 go test -count=1 -v -timeout 22m ./tests/interop/ 2>&1 |
	grep --line-buffered -v -E '^\s+(server )?ping data: rdma-ping-' # rping -v payload lines are long; drop them
rc=${PIPESTATUS[0]}
set -e
echo "== interop: finished in $(($(date +%s) - t0)) s, exit $rc"
[ -f "$CACHE/results.md" ] && cat "$CACHE/results.md"
exit "$rc"
