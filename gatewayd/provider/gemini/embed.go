package gemini

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/upstream"
)

// embeddingsRequest is an OpenAI embeddings body: input is one string or a list of them.
type embeddingsRequest struct {
	Model          string         `json:"model"`
	Input          openai.Strings `json:"input"`
	Dimensions     *int64         `json:"dimensions"`
	EncodingFormat string         `json:"encoding_format"`
}

// batchEmbedRequest is batchEmbedContents' body (https://ai.google.dev/api/embeddings#method:-models.batchembedcontents):
// one request per input.
type batchEmbedRequest struct {
	Requests []embedRequest `json:"requests"`
}

type embedRequest struct {
	Model                string  `json:"model"`
	Content              content `json:"content"`
	OutputDimensionality *int64  `json:"outputDimensionality,omitempty"`
}

type batchEmbedResponse struct {
	Embeddings []struct {
		Values []float64 `json:"values"`
	} `json:"embeddings"`
	UsageMetadata *usageMetadata `json:"usageMetadata"`
}

// embedBody is the batchEmbedContents body of an OpenAI embeddings body, and whether the client wants base64.
func embedBody(body []byte, model string) ([]byte, bool, error) {
	var r embeddingsRequest
	if err := json.Unmarshal(body, &r, json.RejectUnknownMembers(true)); err != nil {
		return nil, false, openai.BodyError(Kind, err)
	}
	if len(r.Input) == 0 {
		return nil, false, refuse("input", "needs at least one string to embed")
	}
	if r.EncodingFormat != "" && r.EncodingFormat != "float" && r.EncodingFormat != "base64" {
		return nil, false, refuse("encoding_format", "takes float or base64")
	}
	req := batchEmbedRequest{Requests: make([]embedRequest, len(r.Input))}
	for i := range r.Input {
		req.Requests[i] = embedRequest{Model: "models/" + model, Content: content{Parts: []part{{Text: &r.Input[i]}}}, OutputDimensionality: r.Dimensions}
	}
	out, err := json.Marshal(req)
	return out, r.EncodingFormat == "base64", err
}

// embeddingsAnswer is OpenAI's embeddings answer.
type embeddingsAnswer struct {
	Object string           `json:"object"`
	Data   []embeddingDatum `json:"data"`
	Model  string           `json:"model"`
	Usage  struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	} `json:"usage"`
}

type embeddingDatum struct {
	Object    string         `json:"object"`
	Index     int            `json:"index"`
	Embedding jsontext.Value `json:"embedding"`
}

// embeddings translates batchEmbedContents' answer: one datum per input, in order, as floats or as the base64 of
// little-endian float32s (what OpenAI's encoding_format=base64 gives). Gemini's embeddings answer reports no
// usage unless it sends usageMetadata.
func (t *translation) embeddings(body []byte) ([]byte, upstream.Usage, error) {
	var r batchEmbedResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, upstream.Usage{}, errors.New("the GEMINI answer is not a batchEmbedContents answer: " + err.Error())
	}
	u := r.UsageMetadata.usage()
	a := embeddingsAnswer{Object: "list", Data: make([]embeddingDatum, len(r.Embeddings)), Model: t.model}
	a.Usage.PromptTokens, a.Usage.TotalTokens = u.PromptTokens, u.Total()
	for i, e := range r.Embeddings {
		var v jsontext.Value
		var err error
		if t.base64 {
			raw := make([]byte, 4*len(e.Values))
			for j, f := range e.Values {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(float32(f)))
			}
			v, err = json.Marshal(base64.StdEncoding.EncodeToString(raw))
		} else {
			v, err = json.Marshal(e.Values)
		}
		if err != nil {
			return nil, u, err
		}
		a.Data[i] = embeddingDatum{Object: "embedding", Index: i, Embedding: v}
	}
	out, err := json.Marshal(a)
	return out, u, err
}
