package kit

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// duplicateMember answers 400 invalid_request naming the first member that raw names twice in one object, at any
// depth, as the OpenAI routes refuse it (jsontext's default): encoding/json keeps the last of the two, another
// reader the first, so the body does not say one thing. It reports whether it answered; any other fault of raw
// is left to the decoder.
func duplicateMember(w http.ResponseWriter, raw []byte) bool {
	_, err := jsontext.NewDecoder(bytes.NewReader(raw)).ReadValue()
	var syn *jsontext.SyntacticError
	if !errors.As(err, &syn) || !errors.Is(syn.Err, jsontext.ErrDuplicateName) {
		return false
	}
	f := httperr.FieldPath(syn.JSONPointer)
	msg := fmt.Sprintf("%s is given twice; give each member once.", f)
	httperr.Write(w, http.StatusBadRequest, httperr.CodeInvalidRequest, msg, []httperr.FieldError{{Field: f, Message: "duplicate member"}})
	return true
}
