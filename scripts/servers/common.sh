# Sourced by the server scripts here: what they all do the same way.

# Installs those of the Debian packages that are not installed yet. `name`, the calling script,
# names it in the message. policy-rc.d keeps a package from starting a system-wide service.
install_packages() {
  local name=$1 missing=() p
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "$name: installing ${missing[*]}" >&2
  local sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Whether something listens on 127.0.0.1:PORT.
port_taken() { (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# For a start(DIR [PORT]) of one server, with the caller's `dir` and `port` set from its
# arguments: makes DIR and `dir` absolute, chooses `port` unless given (the port DIR's server
# had, else a free one from the caller's free_port) and keeps it in DIR/port.
settle_dir_and_port() {
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -z "$port" ]; then
    if [ -f "$dir/port" ]; then port=$(cat "$dir/port"); else port=$(free_port); fi
  fi
  echo "$port" >"$dir/port"
}

# Prints the first port from FIRST to LAST that nobody listens on; `name`, the calling script,
# names it in the error when there is none.
first_free_port() {
  local name=$1 port
  for port in $(seq "$2" "$3"); do
    port_taken "$port" || { echo "$port"; return; }
  done
  echo "$name: no free port in $2-$3" >&2
  exit 69
}
