// Package stdwebhook is the one webhook sender of gatewayd: it POSTs a JSON body signed the Standard Webhooks way
// (headers webhook-id, webhook-timestamp and webhook-signature). Billing batches (gatewayd/billing) and async
// inference results (gatewayd/async) both go through it, so a receiver verifies both with one library.
package stdwebhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Post POSTs the JSON body to url as the Standard Webhooks message msgID sent at ts (Unix seconds), signed with
// secret, and succeeds on a 2xx answer. timeout bounds the whole POST.
func Post(ctx context.Context, client *http.Client, timeout time.Duration, url, secret, msgID string, ts int64, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("failed to build the webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(secret, msgID, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook unreachable: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}

// Sign returns the Standard Webhooks signature header value "v1,<base64 HMAC-SHA256 of id.timestamp.body>".
// A secret of the form "whsec_<base64>" is used as the decoded bytes, as the Standard Webhooks libraries do;
// any other secret is used as is.
func Sign(secret, msgID string, ts int64, body []byte) string {
	key := []byte(secret)
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(rest); err == nil {
			key = k
		}
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + strconv.FormatInt(ts, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
