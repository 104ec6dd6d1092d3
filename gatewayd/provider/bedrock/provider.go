// Package bedrock is the BEDROCK provider: Amazon Bedrock's Converse API. It translates an OpenAI chat body
// into a Converse body (request.go), and the answer, whole or streamed as AWS's binary event stream, back into
// OpenAI's chat answer and chunks (answer.go), with the usage of Converse's usage. Each call is signed with AWS
// SigV4 (aws-sdk-go-v2's signer, service bedrock, the target's region) from the target Secret's
// aws_access_key_id, aws_secret_access_key and optional aws_session_token. Embeddings are not served.
// docs/rest-api.md "Provider field mapping" lists how each client member is mapped or refused.
package bedrock

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/encoding/httpbinding"
	json "github.com/go-json-experiment/json"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Kind is the provider name an Endpoint target gives.
const Kind = "BEDROCK"

// SigningName is the service SigV4 signs Bedrock's runtime calls for.
const SigningName = "bedrock"

// The entries of a BEDROCK target's Secret.
const (
	SecretAccessKeyID     = "aws_access_key_id"
	SecretSecretAccessKey = "aws_secret_access_key"
	SecretSessionToken    = "aws_session_token"
)

func init() { provider.Register(Kind, Provider{}) }

// Provider is the BEDROCK provider. It has no state; the region a call is signed for is its target's (Dialect).
type Provider struct{}

// Request is the URL and Converse body of call's try on t: {baseURL}/model/{model}/converse, or
// /converse-stream for a stream. The model id is escaped as aws-sdk-go-v2 escapes a path label (":" as %3A,
// "/" of an ARN as %2F). The model is the target's, or else the client's.
func (Provider) Request(t *view.Target, call provider.Call) (string, []byte, error) {
	if call.Route != "/chat/completions" {
		return "", nil, &provider.Unsupported{Provider: Kind, Route: call.Route}
	}
	model := openai.ModelOf(t, call.Body)
	body, err := translateRequest(call.Body)
	if err != nil {
		return "", nil, err
	}
	url := t.BaseURL + "/model/" + httpbinding.EscapePath(model, true) + "/converse"
	if call.Stream {
		url += "-stream"
	}
	return url, body, nil
}

// Translation translates the answer of call's try on t into OpenAI's.
func (Provider) Translation(t *view.Target, call provider.Call) upstream.Translation {
	return &translation{id: ids.New(ids.ChatCompletion), model: openai.ModelOf(t, call.Body), created: time.Now().Unix()}
}

// Dialect is the signer of t's calls, for its region.
func (Provider) Dialect(t *view.Target) upstream.Dialect { return Signer{Region: t.Region} }

// Authorize does nothing: a BEDROCK call carries no key, it is signed (Signer).
func (Provider) Authorize(http.Header, string) {}

// AnswerUsage reads the usage of a whole Converse answer.
func (Provider) AnswerUsage(body []byte) (upstream.Usage, bool) {
	var r converseResponse
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return upstream.Usage{}, false
	}
	return r.Usage.usage(), true
}

// EventUsage reads nothing: a BEDROCK stream is binary, read by its Translation.
func (Provider) EventUsage([]byte, bool) (upstream.Usage, bool, bool) {
	return upstream.Usage{}, false, true
}

// Signer signs BEDROCK calls with SigV4 for one region.
type Signer struct {
	Provider
	Region string
}

// signer is aws-sdk-go-v2's SigV4 signer; it is safe for concurrent use and caches derived signing keys.
var signer = v4.NewSigner()

// Sign signs req, whose body is body, with the credentials of secret (the target Secret's data), for the
// service bedrock in s.Region, as aws-sdk-go-v2's own Bedrock client signs it.
func (s Signer) Sign(req *http.Request, body []byte, secret map[string][]byte) error {
	id, key := secret[SecretAccessKeyID], secret[SecretSecretAccessKey]
	if len(id) == 0 || len(key) == 0 {
		return errors.New("the BEDROCK target's Secret needs " + SecretAccessKeyID + " and " + SecretSecretAccessKey)
	}
	if s.Region == "" {
		return errors.New("the BEDROCK target names no region")
	}
	creds := aws.Credentials{AccessKeyID: string(id), SecretAccessKey: string(key), SessionToken: string(secret[SecretSessionToken])}
	sum := sha256.Sum256(body)
	return signer.SignHTTP(req.Context(), creds, req, hex.EncodeToString(sum[:]), SigningName, s.Region, time.Now())
}
