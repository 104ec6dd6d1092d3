package upstream

import "encoding/json"

// Usage is the OpenAI usage object.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Total is what a TOKEN limit charges: prompt plus completion tokens, or the reported total when an upstream
// gives only that.
func (u Usage) Total() int64 {
	if n := u.PromptTokens + u.CompletionTokens; n > 0 {
		return n
	}
	return u.TotalTokens
}

// usageOf reads the usage of a JSON response or stream chunk, and whether the chunk carries no choice (the
// final usage chunk of a stream).
func usageOf(b []byte) (u Usage, ok, noChoices bool) {
	var v struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *Usage            `json:"usage"`
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil {
		return Usage{}, false, false
	}
	return *v.Usage, true, len(v.Choices) == 0
}
