#!/usr/bin/env bash
# Reports the functions no command of mcpvisor reaches (deadcode, from the
# tools module, built by make vet into .deps/tools), and fails if there
# are any. Two kinds of package, and one kind of method, are exempt:
# - the packages that exist for the tests (the load client, the test
#   servers, the OTLP receiver, fleettest, the fake OAuth servers): no
#   command is meant to reach them;
# - String and GoString methods: fmt calls them through its interfaces,
#   which deadcode does not follow, and those of types holding a secret
#   are what keep it out of any %v or %#v a later change may write;
# - the public API of lifecycle and watchdog, where a test or an example
#   reaches it (another Go project is its caller): such a function is
#   reported only when the tests and examples of lifecycle and watchdog
#   themselves do not reach it either (deadcode -test with those packages
#   as its roots: a fifth of the time of all tests as roots).
set -euo pipefail
deadcode=${DEADCODE:-.deps/tools/deadcode}
testsupport='^internal/(loadtest|testserver|telemetry/otlptest|fleet/fleettest|oauthclient/oauthtest|authn/authntest)/|unreachable func: [A-Za-z_]+\.(String|GoString)$'
public='^(lifecycle|watchdog)/'

prod=$("$deadcode" ./...)
pub=$("$deadcode" -test ./lifecycle/... ./watchdog/...)
findings=$(
  {
    grep -Ev "$testsupport|$public" <<<"$prod" || [ $? -eq 1 ] # 1: no line left; 2: grep failed
    grep -E "$public" <<<"$pub" || [ $? -eq 1 ]
  } | sed '/^$/d' | sort -u
)
if [ -n "$findings" ]; then
  echo "deadcode: functions nothing reaches (remove them, or move what only tests use into a _test.go file):" >&2
  echo "$findings" >&2
  exit 1
fi
