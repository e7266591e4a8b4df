// Package packaging holds the Debian package's build: nfpm.yaml (the
// package, built by nfpm), build-deb.sh (stages the binary, manual page,
// changelog and samples, then runs nfpm), version.sh (versions dpkg
// orders) and deb/ (units, maintainer scripts, sysusers.d, copyright).
// `make package` runs them. Its tests build the package and check it as
// Debian does: lintian, systemd-analyze security, an install into a
// throwaway root.
package packaging
