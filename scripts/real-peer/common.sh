# Shared settings of the real-peer rig (sourced by start, restart and stop).
#
# A development rig: it runs a Pi Daemon you built yourself from its public source, next to
# `pi-conform fake-model`. Nothing of Pi Daemon is part of this project.
#
#   PI_DAEMON_DIST   the built `dist/` directory of Pi Daemon 0.3.3 (holds cli.js)   (required)
#   PI_DAEMON_NODE   a node 22 binary                                             (required)
#   PI_PEER_DIR      the rig directory R (short: socket paths must stay < 100 bytes)
#                    default /tmp/pi-peer
#   PI_CONFORM       the pi-conform binary, default `pi-conform` on PATH
#   PI_PEER_PORT     fake-model's loopback port; default 0: fake-model picks a free one (so
#                    several rigs can run at once); the port in use is in R/fake-model.port
set -eu

die() { echo "real-peer: $*" >&2; exit 2; }

: "${PI_DAEMON_DIST:?set PI_DAEMON_DIST to the built dist/ directory of Pi Daemon 0.3.3}"
: "${PI_DAEMON_NODE:?set PI_DAEMON_NODE to a node 22 binary}"
R="${PI_PEER_DIR:-/tmp/pi-peer}"
PORT="${PI_PEER_PORT:-0}"
PC="${PI_CONFORM:-pi-conform}"
[ -f "$PI_DAEMON_DIST/cli.js" ] || die "no cli.js in PI_DAEMON_DIST=$PI_DAEMON_DIST"
[ -x "$PI_DAEMON_NODE" ] || die "PI_DAEMON_NODE=$PI_DAEMON_NODE is not executable"
SOCK="$R/run/pid.sock"
[ "${#SOCK}" -lt 100 ] || die "socket path $SOCK is too long (>= 100 bytes); use a shorter PI_PEER_DIR"

# Whether process $1 still runs (a zombie, killed but not yet reaped, counts as gone).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    if [ -r "/proc/$1/stat" ]; then
        state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
        [ "$state" != Z ] || return 1
    fi
    return 0
}

start_daemon() {
    rm -f "$SOCK"
    HOME="$R/home" nohup "$PI_DAEMON_NODE" "$PI_DAEMON_DIST/cli.js" serve --socket "$SOCK" \
        --state-dir "$R/state" --agent-dir "$R/agent" --allow-root "$R/work" \
        >>"$R/daemon.log" 2>&1 </dev/null &
    echo $! >"$R/daemon.pid"
    # Wait for the socket (node takes a moment to load).
    i=0
    while [ ! -S "$SOCK" ]; do
        i=$((i + 1))
        [ "$i" -le 300 ] || die "the daemon did not create $SOCK within 30 s (see $R/daemon.log)"
        alive "$(cat "$R/daemon.pid")" || die "the daemon exited (see $R/daemon.log)"
        sleep 0.1
    done
}

# kill -9 the process named by pid file $1, and wait until it is really gone, so that a
# restart never runs two daemons on one state directory.
kill_pidfile() {
    f="$1"
    if [ -f "$f" ]; then
        pid=$(cat "$f")
        kill -9 "$pid" 2>/dev/null || true
        i=0
        while alive "$pid" && [ "$i" -lt 100 ]; do
            i=$((i + 1))
            sleep 0.05
        done
        alive "$pid" && echo "real-peer: pid $pid survived kill -9 for 5 s" >&2
        rm -f "$f"
    fi
}
