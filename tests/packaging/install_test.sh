#!/usr/bin/env bash
# `cmake --install` into a scratch DESTDIR: the binary runs and accepts the installed
# configuration, the systemd unit points at both and reloads with SIGHUP, and a second install
# keeps a configuration the operator edited.
set -euo pipefail
build=$1
root=$(mktemp -d /tmp/ratewall-install-XXXXXX)
trap 'rm -rf "$root"' EXIT
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
fail() { echo "FAIL: $*" >&2; exit 1; }

DESTDIR=$root cmake --install "$build" >/dev/null
binary=$root$prefix/bin/ratewall
unit=$(find "$root" -name ratewall.service)
config=$(find "$root" -path '*/ratewall/ratewall.yaml')
[[ -x $binary ]] || fail "no binary at $binary"
[[ -n $unit ]] || fail "no ratewall.service installed"
[[ -n $config ]] || fail "no ratewall.yaml installed"
"$binary" check "$config" >/dev/null || fail "the installed binary refuses the installed config"

# The unit names the installed paths (without DESTDIR) and keeps its promises.
installed_config=${config#"$root"}
for line in "ExecStart=$prefix/bin/ratewall --config $installed_config" \
            "ExecStartPre=$prefix/bin/ratewall check $installed_config" \
            'ExecReload=/bin/kill -HUP $MAINPID' 'ProtectSystem=strict' 'NoNewPrivileges=yes' \
            'DynamicUser=yes' 'StateDirectory=ratewall' 'CapabilityBoundingSet=CAP_NET_BIND_SERVICE'; do
  grep -qxF -- "$line" "$unit" || fail "$unit lacks: $line"
done
if command -v systemd-analyze >/dev/null && [[ -d /run/systemd/system ]]; then
  systemd-analyze verify --root="$root" "$unit" || fail "systemd-analyze verify"
fi

# An edited configuration is the operator's: a second install leaves it.
echo "# edited by the operator" >>"$config"
DESTDIR=$root cmake --install "$build" >/dev/null
grep -q "edited by the operator" "$config" || fail "a second install replaced the edited config"
echo "install test: ok ($binary, $unit, $config)"
