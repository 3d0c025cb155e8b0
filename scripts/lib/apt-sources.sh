# Shared shell helpers: the host's own Debian mirror, read from its apt configuration (the
# project names no mirror host; every Debian download goes where the host's apt goes).
#
#   . scripts/lib/apt-sources.sh
#   host_sources          # "URI SUITE" per enabled deb source (one-line and deb822 formats)
#   mirror_for SUITE      # the URI of the first source serving SUITE (no trailing slash)
#
# Sourced by scripts/qemu/setup.sh and scripts/dev/clean-room-ci.sh (bash).

# Prints "URI SUITE" for every enabled deb source of the host (one-line and deb822 formats).
host_sources() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" { i = 2
                 if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                 if (i + 1 <= NF) print $i, $(i + 1) }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'function flush() {
                 if (types ~ /(^| )deb( |$)/ && enabled != "no") {
                     n = split(uris, u, " "); m = split(suites, s, " ")
                     for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j]
                 }
                 types = uris = suites = ""; enabled = "yes"
             }
             BEGIN { enabled = "yes" }
             /^[ \t]*#/ { next }
             /^[ \t]*$/ { flush(); next }
             { key = tolower($1); sub(/:$/, "", key); $1 = ""; val = $0; sub(/^ +/, "", val)
               if (key == "types") types = val; else if (key == "uris") uris = val
               else if (key == "suites") suites = val; else if (key == "enabled") enabled = tolower(val) }
             END { flush() }' "$f"
    done
}
mirror_for() { host_sources | awk -v s="$1" '$2 == s { sub(/\/+$/, "", $1); print $1; exit }'; }
