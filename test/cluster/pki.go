package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the cluster's certificate authority: one CA signs every serving and client certificate, as kubeadm's
// cluster CA does. Each file is written under dir.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "modelgate-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key}
	if err := writePEM(p.CAFile(), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return p, nil
}

// CAFile is the CA certificate: every component's trust root.
func (p *pki) CAFile() string { return filepath.Join(p.dir, "ca.crt") }

// CAPEM is the CA certificate's PEM bytes.
func (p *pki) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.caCert.Raw})
}

// issue writes name.crt and name.key: a certificate for cn in organizations orgs, for serving (with the given IP
// and DNS SANs) when hosts are given, for client authentication always.
func (p *pki) issue(name, cn string, orgs []string, hosts ...string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return "", "", fmt.Errorf("failed to sign the certificate of %s: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "EC PRIVATE KEY", keyDER)
}

// serviceAccountKey writes the RSA key pair that signs and verifies service account tokens.
func (p *pki) serviceAccountKey() (keyFile, pubFile string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(p.dir, "sa.key"), filepath.Join(p.dir, "sa.pub")
	if err := writePEM(keyFile, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, writePEM(pubFile, "PUBLIC KEY", pub)
}

// kubeconfig writes name.kubeconfig: the API server at server, as the client certificate issued for (cn, orgs).
func (p *pki) kubeconfig(name, server, cn string, orgs ...string) (string, error) {
	certFile, keyFile, err := p.issue(name, cn, orgs)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["modelgate"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.CAFile()}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["modelgate"] = &clientcmdapi.Context{Cluster: "modelgate", AuthInfo: name}
	cfg.CurrentContext = "modelgate"
	path := filepath.Join(p.dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
