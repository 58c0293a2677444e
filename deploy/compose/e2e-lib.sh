# Shared by e2e.sh and e2e-variants.sh (sourced, not run): each defines
# fail before it calls these.

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every second until
# it succeeds, or fail naming DESCRIPTION.
wait_for() {
	local timeout=$1 what=$2
	shift 2
	local deadline=$((SECONDS + timeout))
	until "$@"; do
		((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for: $what"
		sleep 1
	done
}
