package chainpay

import "errors"

// Errors of the offline checks.
var (
	ErrMalformed      = errors.New("malformed")
	ErrUnsupported    = errors.New("unsupported version")
	ErrBadEnvelope    = errors.New("bad envelope")
	ErrSignerMismatch = errors.New("record names another peer than its signer")
	ErrSignature      = errors.New("bad payment-key signature")
)
