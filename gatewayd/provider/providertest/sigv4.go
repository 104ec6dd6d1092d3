package providertest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// VerifySigV4 recomputes the AWS SigV4 signature of r, a request a loopback fake received with its body, with
// aws-sdk-go-v2's signer from creds, for service in region at the request's X-Amz-Date, over the headers the
// request says it signed, and compares it with the one r carries. A session token must travel in
// X-Amz-Security-Token.
func VerifySigV4(r *http.Request, body []byte, creds aws.Credentials, service, region string) error {
	auth := r.Header.Get("Authorization")
	_, signedPart, ok := strings.Cut(auth, "SignedHeaders=")
	if !ok {
		return fmt.Errorf("no SigV4 Authorization header: %q", auth)
	}
	signed, _, _ := strings.Cut(signedPart, ",")
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %w", err)
	}
	if got := r.Header.Get("X-Amz-Security-Token"); got != creds.SessionToken {
		return fmt.Errorf("X-Amz-Security-Token %q, want %q", got, creds.SessionToken)
	}
	again, err := http.NewRequest(r.Method, "http://"+r.Host+r.RequestURI, bytes.NewReader(body))
	if err != nil {
		return err
	}
	again.ContentLength = r.ContentLength
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	again.Header.Del("X-Amz-Security-Token")
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, again, hex.EncodeToString(sum[:]), service, region, at); err != nil {
		return err
	}
	if want := again.Header.Get("Authorization"); auth != want {
		return fmt.Errorf("signature\n  %s\nwant\n  %s", auth, want)
	}
	return nil
}
