package authn

import (
	"fmt"
	"net/http"
	"time"
)

// RFC 6750 §3.1 error codes, and one of mcpvisor's own for an issuer it
// cannot reach.
const (
	CodeInvalidRequest    = "invalid_request"
	CodeInvalidToken      = "invalid_token"
	CodeInsufficientScope = "insufficient_scope"
	// CodeUnavailable: the issuer's metadata, JWKS or introspection
	// endpoint could not be reached or answered badly. Not the client's
	// fault: the caller answers 503 with Retry-After and no challenge.
	CodeUnavailable = "issuer_unavailable"
)

// Error is why a request's credentials were refused. Its Description is
// short and safe to send to the client: it never holds the token or any
// claim value. The cause (for logs) is reached with errors.Unwrap; it
// never holds the token either.
type Error struct {
	Code        string
	Description string
	// RetryAfter is set with CodeUnavailable: when trying again makes
	// sense.
	RetryAfter time.Duration
	cause      error
}

func (e *Error) Error() string {
	if e.cause != nil {
		return e.Code + ": " + e.Description + ": " + e.cause.Error()
	}
	return e.Code + ": " + e.Description
}

func (e *Error) Unwrap() error { return e.cause }

// Status is the HTTP status the error is answered with.
func (e *Error) Status() int { return statusOf(e.Code) }

// Challenge is the answer to the request the error refused, pointing the
// client at resourceMetadata and, for a missing or bad token, at scopes.
func (e *Error) Challenge(resourceMetadata string, scopes []string) *Challenge {
	c := &Challenge{Status: e.Status(), Error: e.Code, Description: e.Description,
		ResourceMetadata: resourceMetadata, Scopes: scopes, RetryAfter: e.RetryAfter}
	if e.Code == CodeUnavailable {
		c.Error = ""
		c.Description = "the authorization server is unavailable"
	}
	return c
}

func statusOf(code string) int {
	switch code {
	case CodeInvalidRequest:
		return http.StatusBadRequest
	case CodeInsufficientScope:
		return http.StatusForbidden
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusUnauthorized
	}
}

func invalidToken(desc string, cause error) *Error {
	return &Error{Code: CodeInvalidToken, Description: desc, cause: cause}
}

func invalidRequest(desc string) *Error {
	return &Error{Code: CodeInvalidRequest, Description: desc}
}

func unavailable(desc string, retry time.Duration, cause error) *Error {
	if retry < time.Second {
		retry = time.Second
	}
	return &Error{Code: CodeUnavailable, Description: desc, RetryAfter: retry, cause: cause}
}

// errorf is fmt.Errorf, for causes that must never carry a token: only
// fixed text, URLs of configured endpoints and status codes go in.
func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
