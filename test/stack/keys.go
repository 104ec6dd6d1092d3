package stack

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/modelgate/modelgate/api/apikey"
)

// NewWorkspaceKey returns a fresh workspace API key in the product's format: "mgw_" plus 12 random base62
// characters (the 16-character lookup prefix), a dot, and 32 random base62 characters.
func NewWorkspaceKey() (string, error) { return apikey.Mint(apikey.Workspace) }

// LoadOrCreateSigningKey returns the workspace's Ed25519 key kept at path as PKCS#8 PEM, creating it when the
// file does not exist. Reusing it across runs keeps scripts that sign key registrations working.
func LoadOrCreateSigningKey(path string) (ed25519.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		block, _ := pem.Decode(raw)
		if block == nil {
			return nil, fmt.Errorf("failed to read signing key %s: no PEM block", path)
		}
		parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("failed to parse signing key %s: %w", path, err)
		}
		key, ok := parsed.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("signing key %s is a %T, not Ed25519", path, parsed)
		}
		return key, nil
	case errors.Is(err, os.ErrNotExist):
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("failed to generate signing key: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("failed to encode signing key: %w", err)
		}
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, fmt.Errorf("failed to write signing key: %w", err)
		}
		return key, nil
	default:
		return nil, fmt.Errorf("failed to read signing key %s: %w", path, err)
	}
}

// PublicKeyBase64 is the Workspace.spec.keyRegistration.publicKey form: standard base64 of the raw 32 bytes.
func PublicKeyBase64(key ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
}
