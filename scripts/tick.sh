# Sourced by scripts/servers and scripts/ticking.
#
# tick_wait PID LINE: waits for the background job PID, printing
# "LINE (N s)" every 10 s while it runs, so that a long step (debootstrap,
# apt, a compile on a cold Go cache) is never silent; returns its status.
tick_wait() {
	local pid=$1 line=$2 t0
	t0=$(date +%s)
	while kill -0 "$pid" 2>/dev/null; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			sleep 1
			kill -0 "$pid" 2>/dev/null || break
		done
		kill -0 "$pid" 2>/dev/null && echo "$line ($(($(date +%s) - t0)) s)"
	done
	wait "$pid"
}
