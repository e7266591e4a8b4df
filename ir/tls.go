package ir

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
)

// Secret is TLS material served over SDS: a certificate chain with its
// private key, or the CA certificates a peer must chain to (TrustedCA).
// Listeners and clusters refer to secrets by name, so a certificate
// rotation changes the secret and nothing else. The contents are PEM.
type Secret struct {
	Name             string
	CertificateChain []byte
	PrivateKey       Redacted
	TrustedCA        []byte
}

// Redacted holds sensitive bytes (private keys). It prints, and encodes
// to JSON and text, as "[redacted]", so a model that ends up in a log
// line or an error message does not carry the key with it. Decoding is
// the other way round: "[redacted]" decodes to no bytes, so a model
// read back from JSON has no keys and whoever reads it must supply them
// from where they are kept (without them the model does not validate).
type Redacted []byte

const redactedText = "[redacted]"

// ErrRedacted is the error of decoding a Redacted from anything other
// than "[redacted]".
var ErrRedacted = errors.New(`a redacted value decodes only from "` + redactedText + `"`)

// Format prints "[redacted]" for every verb.
func (Redacted) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redactedText) }

// MarshalText encodes "[redacted]".
func (Redacted) MarshalText() ([]byte, error) { return []byte(redactedText), nil }

// UnmarshalText decodes "[redacted]", what MarshalText writes, to no
// bytes. Any other text is ErrRedacted rather than a key: no encoding of
// a Redacted holds one, and the error does not quote the text, which
// might.
func (r *Redacted) UnmarshalText(text []byte) error {
	if string(text) != redactedText {
		return ErrRedacted
	}
	*r = nil
	return nil
}

// DownstreamTLS is TLS terminated by a listener. Clients are matched to a
// certificate by the server name they send (SNI): a filter chain per
// entry of SNI, and one for everything else with DefaultCertificate.
type DownstreamTLS struct {
	// DefaultCertificate is the secret of clients whose server name
	// matches no SNI entry, or who send none.
	DefaultCertificate string
	// SNI lists the certificates chosen by server name, sorted by secret
	// name; empty when every client gets DefaultCertificate.
	SNI []SNICertificate
	// ClientCASecret, if set, makes client certificates mandatory and
	// verifies them against the CA certificates of that secret.
	ClientCASecret string
	// MinVersion and MaxVersion are "1.0" to "1.3"; "" keeps Envoy's
	// default.
	MinVersion, MaxVersion string
	// ALPN is offered to clients in order.
	ALPN []string
}

// SNICertificate is a certificate served to clients that ask for one of
// ServerNames (exact names or "*.suffix" wildcards, sorted).
type SNICertificate struct {
	Secret      string
	ServerNames []string
}

// secretNames are the secrets a listener or cluster refers to.
func (t *DownstreamTLS) secretNames() []string {
	if t == nil {
		return nil
	}
	out := []string{t.DefaultCertificate}
	for _, s := range t.SNI {
		out = append(out, s.Secret)
	}
	if t.ClientCASecret != "" {
		out = append(out, t.ClientCASecret)
	}
	return out
}

func (t *UpstreamTLS) secretNames() []string {
	if t == nil {
		return nil
	}
	var out []string
	if t.CertificateSecret != "" {
		out = append(out, t.CertificateSecret)
	}
	if t.CASecret != "" {
		out = append(out, t.CASecret)
	}
	return out
}

// ErrSecret marks a missing, empty or malformed secret.
var ErrSecret = errors.New("invalid secret")

// validateSecrets checks that secrets are sorted, unique and complete, and
// that every name in refs (from the listeners or clusters that may use
// them) is among them or in also.
func validateSecrets(scope string, secrets []Secret, refs map[string]string, also []Secret) []error {
	var errs []error
	have := map[string]bool{}
	for i, s := range secrets {
		if i > 0 {
			switch prev := secrets[i-1].Name; {
			case prev == s.Name:
				errs = append(errs, fmt.Errorf("%s secret %q: %w", scope, s.Name, ErrDuplicate))
			case prev > s.Name:
				errs = append(errs, fmt.Errorf("%s secret %q after %q: %w", scope, s.Name, prev, ErrUnsorted))
			}
		}
		have[s.Name] = true
		cert := len(s.CertificateChain) > 0 || len(s.PrivateKey) > 0
		switch {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("%s secret %d: name is empty: %w", scope, i, ErrSecret))
		case cert && len(s.TrustedCA) > 0:
			errs = append(errs, fmt.Errorf("%s secret %q: both a certificate and trusted CAs: %w", scope, s.Name, ErrSecret))
		case cert && (len(s.CertificateChain) == 0 || len(s.PrivateKey) == 0):
			errs = append(errs, fmt.Errorf("%s secret %q: certificate without key or key without certificate: %w", scope, s.Name, ErrSecret))
		case !cert && len(s.TrustedCA) == 0:
			// The policy's files were never read (policy.ReadFiles).
			errs = append(errs, fmt.Errorf("%s secret %q is empty (were the policy's TLS files read?): %w", scope, s.Name, ErrSecret))
		}
	}
	for _, s := range also {
		have[s.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		if !have[name] {
			errs = append(errs, fmt.Errorf("%s refers to secret %q, which does not exist: %w", refs[name], name, ErrSecret))
		}
	}
	return errs
}
