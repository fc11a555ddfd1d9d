# Sourced by the scripts/setup-*.sh that fetch jars from Maven Central into a cache directory.
# maven_tools WHO: install Java and Maven through apt when missing (scripts/_apt.sh).
# maven_publish TMP DIR: mark TMP complete and move it to DIR, the directory the tests read
# (a directory without .complete is fetched again), and print DIR.
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

maven_tools() {
  local missing=()
  command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  apt_install "$1" "Maven Central's jars (Java and Maven)" "${missing[@]}"
}

maven_publish() {
  touch "$1/.complete"
  mkdir -p "$(dirname "$2")"
  rm -rf "$2"
  mv "$1" "$2"
  echo "$2"
}
