package policy

import (
	"bytes"
	"io"
	"regexp"
	"strings"
)

// Redacted replaces a secret in text the bridge shows or logs.
const Redacted = "[REDACTED]"

// secretPattern finds key material pasted where it does not belong (a
// private key as a cert_file path, a token as a domain) once it has made
// its way into a message:
//   - a PEM private key block of any kind (PKCS #8, RSA, EC, OpenSSH,
//     encrypted), whole or cut off, with real or escaped (\n, \\n)
//     newlines, as log encoders and %q print them;
//   - a run of 40 or more base64 characters that begins like DER key or
//     certificate material (MII…, MHc…, MIG…, MC4…), or a JWT (eyJ…);
//   - lines of 64 base64 characters and the shorter line after them (a
//     PEM body without its BEGIN line);
//   - any other run of 64 or more base64 characters (a PEM body line)
//     mixing upper case, lower case and digits, with few slashes (a long
//     file path is left alone).
//
// Hex digests (sha256 of sources, versions) are lower case only and
// never match.
var secretPattern = regexp.MustCompile(
	`-----BEGIN[ A-Z0-9]*PRIVATE KEY-----(?:[A-Za-z0-9+/=\s\\:,.-]*?-----END[ A-Z0-9]*PRIVATE KEY-----|[A-Za-z0-9+/=\s\\:,.-]*)` +
		`|(?:MII|MHc|MIG|MC4|eyJ)[A-Za-z0-9+/_.-]{37,}=*` +
		`|(?:[A-Za-z0-9+/]{64}(?:\r?\n|\\r?\\n|\\\\n))+[A-Za-z0-9+/]*=*` +
		`|[A-Za-z0-9+/]{64,}=*`)

// RedactSecrets returns s with every private key, DER blob or token in it
// replaced by Redacted. Every text the bridge shows on its admin pages or
// writes to its log from user input (diagnostics, warnings, errors) goes
// through it: FormatDiagnostics applies it, and so does the log writer
// of the daemon and the agent (NewRedactingWriter).
func RedactSecrets(s string) string {
	if !secretPattern.MatchString(s) {
		return s
	}
	return secretPattern.ReplaceAllStringFunc(s, func(m string) string {
		if isSecret(m) {
			return Redacted
		}
		return m
	})
}

// isSecret tells a match of secretPattern's catch-all from a harmless
// long word: a PEM body line mixes upper case, lower case and digits, and
// has few slashes (one in 64 characters on average), where a file path
// has one every few characters.
func isSecret(m string) bool {
	if m[0] == '-' {
		return true // a PEM private key block
	}
	for _, p := range []string{"MII", "MHc", "MIG", "MC4", "eyJ"} {
		if len(m) >= 40 && m[:3] == p {
			return true
		}
	}
	if strings.IndexAny(m, "\r\n\\") == 64 {
		// Lines of 64 base64 characters: a PEM body. Its slashes are
		// random (a key's continuation lines can hold many), so the
		// file-path test below would let some through.
		return true
	}
	var upper, lower, digit bool
	slashes := 0
	for i := 0; i < len(m); i++ {
		c := m[i]
		upper = upper || 'A' <= c && c <= 'Z'
		lower = lower || 'a' <= c && c <= 'z'
		digit = digit || '0' <= c && c <= '9'
		if c == '/' {
			slashes++
		}
	}
	maxSlashes := len(m) / 16
	if m[0] == '/' {
		maxSlashes = len(m) / 32
	}
	return upper && lower && digit && slashes <= maxSlashes
}

// NewRedactingWriter returns a writer that applies RedactSecrets to each
// write before passing it on. zerolog writes one event per Write, so a
// secret never straddles two writes.
func NewRedactingWriter(w io.Writer) io.Writer { return redactingWriter{w} }

type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	if !secretPattern.Match(p) {
		return r.w.Write(p)
	}
	out := secretPattern.ReplaceAllFunc(p, func(m []byte) []byte {
		if isSecret(string(m)) {
			return []byte(Redacted)
		}
		return m
	})
	if !bytes.HasSuffix(out, []byte("\n")) && bytes.HasSuffix(p, []byte("\n")) {
		out = append(out, '\n')
	}
	if _, err := r.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
