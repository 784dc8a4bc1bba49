#!/bin/bash
# Makes archive-v4.sqlite: an archive of the fourth schema (v4-trimmed), written by imgw and
# imcli built before the fifth schema (commit 67d931f) through their public surfaces:
# one-to-one chats both ways, a group, a deletion, a read marker, a device's saved position,
# a message sent by the server API, a conversation capped (max_per_conversation) and a user
# erased. SQLiteArchiveStoreTests' migration test opens it with today's code.
#
#   IMGW=path/to/imgw IMCLI=path/to/imcli Tests/IMArchiveTests/Fixtures/make-v4-archive.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IMGW=${IMGW:?the imgw of the old version} IMCLI=${IMCLI:?its imcli}
dir=$(mktemp -d); trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listen=$(port) broker=$(port) api=$(port) metrics=$(port)
cat > "$dir/imgw.yaml" <<YAML
listen: {host: 127.0.0.1, port: $listen}
embedded_broker: {host: 127.0.0.1, port: $broker}
auth: {jwt_secret: fixture-secret-0123456789abcdef0123}
api: {host: 127.0.0.1, port: $api, keys: [{name: fixture, key: fixture-api-key-0123456789abcdef0123456789}]}
metrics: {host: 127.0.0.1, port: $metrics}
archive: {path: '$dir/archive.sqlite', max_per_conversation: 4, retention: 3650d}
log_level: info
YAML
"$IMGW" serve --config "$dir/imgw.yaml" > "$dir/imgw.log" 2>&1 & pid=$!
for _ in $(seq 100); do grep -q listening "$dir/imgw.log" && break; sleep 0.1; done
grep -q listening "$dir/imgw.log" || { cat "$dir/imgw.log"; exit 1; }
cli() { "$IMCLI" --config "$dir/imgw.yaml" "$@" > /dev/null; }
export IMGW_CONFIG=$dir/imgw.yaml
"$IMCLI" admin group create team alice bob carol > /dev/null
for i in 1 2 3; do "$IMCLI" send --as alice --to bob --id a-$i "alice to bob $i" > /dev/null; done
"$IMCLI" send --as bob --to alice --id b-1 "bob to alice 1" > /dev/null
"$IMCLI" group send --as carol --group team --id g-1 "carol to the team" > /dev/null
"$IMCLI" send --as alice --to bob --id a-4 "alice to bob 4" > /dev/null
"$IMCLI" delete --as alice a-2 > /dev/null
"$IMCLI" admin send --to bob --from alice --id api-1 "sent by the server API as alice" > /dev/null
"$IMCLI" read --as bob --with alice > /dev/null
# bob's phone takes what it is sent (its position is saved), then alice sends two more:
# 4 kept per conversation, so the cap trims the oldest of bob's and alice's.
timeout 3 "$IMCLI" listen --as bob > /dev/null 2>&1 || true
for i in 5 6; do "$IMCLI" send --as alice --to bob --id a-$i "alice to bob $i" > /dev/null; done
"$IMCLI" send --as dave --to erin --id d-1 "dave to erin" > /dev/null
curl -sf -X DELETE -H "Authorization: Bearer fixture-api-key-0123456789abcdef0123456789" "http://127.0.0.1:$api/v1/users/dave" > /dev/null
# The cap's sweep runs every minute: wait for it (the log says what it trimmed).
for _ in $(seq 90); do grep -q "cap per conversation deleted" "$dir/imgw.log" && break; sleep 1; done
kill -TERM $pid; wait $pid || true
sqlite3 "$dir/archive.sqlite" "PRAGMA wal_checkpoint(TRUNCATE); VACUUM;" > /dev/null
cp "$dir/archive.sqlite" "$here/archive-v4.sqlite"
sqlite3 "$here/archive-v4.sqlite" "SELECT identifier FROM grdb_migrations" | tail -1
echo "written: $here/archive-v4.sqlite ($(stat -c %s "$here/archive-v4.sqlite") bytes)"
