// Package packaging holds the Debian package's build (build-deb.sh, the
// files under deb/) and the test that builds one and inspects it with
// dpkg-deb. `make package` runs the script.
package packaging
