# Source this file (bash/zsh) to export the paths set up by scripts/setup.sh:
#   . scripts/env.sh
# or evaluate it from any shell:
#   eval "$(bash scripts/env.sh)"
_nixl_agent_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export NIXL_LIB_DIR="$_nixl_agent_root/.deps/nixl/.nixl_cu12.mesonpy.libs"
export PROMTOOL="$_nixl_agent_root/.deps/prometheus/usr/bin/promtool"
export PROMETHEUS="$_nixl_agent_root/.deps/prometheus/usr/bin/prometheus"
export ALERTMANAGER="$_nixl_agent_root/.deps/alertmanager/usr/bin/prometheus-alertmanager"
export AMTOOL="$_nixl_agent_root/.deps/alertmanager/usr/bin/amtool"
unset _nixl_agent_root
# When executed rather than sourced, print export lines for eval.
if [ "${BASH_SOURCE[0]:-}" = "${0}" ]; then
    printf 'export NIXL_LIB_DIR=%q\n' "$NIXL_LIB_DIR"
    printf 'export PROMTOOL=%q\n' "$PROMTOOL"
    printf 'export PROMETHEUS=%q\n' "$PROMETHEUS"
    printf 'export ALERTMANAGER=%q\n' "$ALERTMANAGER"
    printf 'export AMTOOL=%q\n' "$AMTOOL"
fi
