# Shared shell helpers: apt states of the project's own (lists, cache, an empty dpkg status)
# under a cache directory, for `apt-get download` of Debian packages that are unpacked with
# `dpkg -x` and never installed. The host's apt sources, lists and status are neither read nor
# written; its apt.conf (proxies) still applies.
#
#   cache=DIR arch=$(dpkg --print-architecture); quiet() { ...; }   # the caller's
#   . scripts/lib/private-apt.sh
#   papt_init NAME SOURCE_LINE...   # CACHE/apt/NAME with these sources (lists dropped on change)
#   papt_update NAME                # refresh the lists when older than a day
#   papt NAME ARGS...               # apt-get with that state
#   papt_cache NAME ARGS...         # apt-cache with that state
#   candidate NAME PACKAGE          # the version apt would take
#
# Sourced by scripts/qemu/setup.sh and scripts/dev/kmod-guest/run.sh (bash). Needs from the
# caller: $cache, $arch, log MSG, and quiet DESC CMD... (run CMD with its output in a log).

papt_opts() {
    local d=$cache/apt/$1
    echo "-o Dir::Etc::SourceList=$d/sources.list -o Dir::Etc::SourceParts=$d/none
          -o Dir::Etc::Preferences=$d/none -o Dir::Etc::PreferencesParts=$d/none
          -o Dir::State::Lists=$d/lists -o Dir::State::Status=$d/status
          -o Dir::State::extended_states=$d/extended_states -o Dir::Cache=$d/cache
          -o APT::Architecture=$arch -o APT::Architectures::=$arch -o APT::Sandbox::User=root
          -o APT::Install-Recommends=false -o Acquire::Languages=none
          -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
          -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
          -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
          -o Acquire::IndexTargets::deb::CNF::DefaultEnabled=false
          -o Acquire::http::Timeout=30 -o Acquire::Retries=2"
}
papt_init() {
    local name=$1 d=$cache/apt/$1; shift
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/none" "$d/debs"
    [ -f "$d/status" ] || : > "$d/status"
    printf '%s\n' "$@" > "$d/sources.list.new"
    if ! cmp -s "$d/sources.list.new" "$d/sources.list" 2>/dev/null; then
        mv "$d/sources.list.new" "$d/sources.list"; rm -f "$d/updated"
    else
        rm -f "$d/sources.list.new"
    fi
}
# shellcheck disable=SC2046 # papt_opts is a word list by design (no spaces in the paths)
papt() { local name=$1; shift; apt-get $(papt_opts "$name") "$@"; }
# shellcheck disable=SC2046
papt_cache() { local name=$1; shift; apt-cache $(papt_opts "$name") "$@"; }
# papt_update NAME: refresh the lists when older than a day. Fails only without usable lists.
papt_update() {
    local d=$cache/apt/$1
    if [ -n "$(find "$d/updated" -mmin -1440 2>/dev/null)" ]; then return 0; fi
    if quiet "apt-get update ($1)" papt "$1" update -qq; then touch "$d/updated"; return 0; fi
    [ -e "$d/updated" ] && { log "$1: package lists not refreshed (offline?); using the previous ones"; return 0; }
    return 1
}
candidate() { papt_cache "$1" show --no-all-versions "$2" 2>/dev/null | awk '/^Version:/ {print $2; exit}'; }
