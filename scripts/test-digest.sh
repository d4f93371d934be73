#!/usr/bin/env bash
# test-digest.sh LOG: after a failed `go test`, repeat what matters of LOG at
# the end of the output: each failing test's own messages (its file:line
# lines, without the daemon logs and tables that tests print as context),
# and any panic. CI shows the head and the tail of a long output; this puts
# the cause in the tail.
set -uo pipefail
log=${1:?usage: test-digest.sh LOG}
echo
echo "=== failure digest (the full output is above) ==="
awk '
	# A failing test: its "--- FAIL" line and the file:line messages that
	# follow it, up to the next test result, at most 40 lines, each cut to
	# 400 characters.
	/^[[:space:]]*--- FAIL/ { infail = 1; n = 0; print; next }
	/^[[:space:]]*--- (PASS|SKIP)/ || /^(ok|FAIL|PASS)[[:space:]]/ { if (infail && /^FAIL/) print; infail = 0 }
	/^panic: / || /^fatal error: / { print; p = 20; next }
	p > 0 { print substr($0, 1, 400); p--; next }
	infail && /^[[:space:]]+[A-Za-z0-9_]+\.go:[0-9]+: / {
		if (n++ < 40) print substr($0, 1, 400)
	}
' "$log"
