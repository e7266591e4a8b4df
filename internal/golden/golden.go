// Package golden holds what the golden tests of each stage share: the JSON
// form of an ir.Model that one stage writes (model/testdata/<case>/
// model.golden.json, the output of model.Build) and the next reads (the
// input of xds.Translate in xds's golden test), and the compare-or-rewrite
// step of every golden file. It imports nothing of the project but ir, so
// the tests of any stage above ir may use it.
//
// Private keys do not survive the JSON: ir.Redacted encodes as
// "[redacted]" and decodes to nothing, in a golden file as in a log line.
// ReadModel and DecodeModel give them back from the case's fixture files,
// taking for each certificate secret the key file that belongs to its
// certificate (tls.X509KeyPair accepts the pair).
package golden

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// ModelFile is the name of a case's model golden file.
const ModelFile = "model.golden.json"

// MarshalModel renders m as indented JSON with a final newline. The
// output is deterministic: the model's slices are sorted, and
// encoding/json sorts map keys.
func MarshalModel(m *ir.Model) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeModel decodes what MarshalModel wrote, rejecting fields ir.Model
// does not have (a golden file older than the model), and gives every
// certificate secret its private key back from the key files under
// keyDir.
func DecodeModel(data []byte, keyDir string) (*ir.Model, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	m := &ir.Model{}
	if err := dec.Decode(m); err != nil {
		return nil, err
	}
	if err := restoreKeys(m, keyDir); err != nil {
		return nil, err
	}
	return m, nil
}

// ReadModel reads a model golden file, with the keys from the files of
// its case directory.
func ReadModel(path string) (*ir.Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := DecodeModel(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// restoreKeys sets the private key of every secret with a certificate
// chain to the contents of the PEM file under dir that is that
// certificate's key.
func restoreKeys(m *ir.Model, dir string) error {
	secrets := []*[]ir.Secret{&m.Secrets}
	for i := range m.Groups {
		secrets = append(secrets, &m.Groups[i].Secrets)
	}
	var keys [][]byte
	for _, list := range secrets {
		for i := range *list {
			s := &(*list)[i]
			if len(s.CertificateChain) == 0 {
				continue
			}
			if keys == nil {
				var err error
				if keys, err = keyFiles(dir); err != nil {
					return err
				}
			}
			s.PrivateKey = nil
			for _, k := range keys {
				if _, err := tls.X509KeyPair(s.CertificateChain, k); err == nil {
					s.PrivateKey = ir.Redacted(k)
					break
				}
			}
			if s.PrivateKey == nil {
				return fmt.Errorf("secret %q: no key file under %s belongs to its certificate", s.Name, dir)
			}
		}
	}
	return nil
}

// keyFiles returns the contents of every file under dir that holds a PEM
// private key, in lexical order of their paths.
func keyFiles(dir string) ([][]byte, error) {
	var keys [][]byte
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte("PRIVATE KEY-----")) {
			keys = append(keys, b)
		}
		return err
	})
	return keys, err
}

// Compare compares got with the golden file at path, or with update
// rewrites the file (creating its directory).
func Compare(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (rerun the test with -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (-want +got); if the change is intended, rerun with -update:\n%s", path, cmp.Diff(string(want), string(got)))
	}
}
