package phos

import (
	"errors"
	"fmt"
)

// Status is what a call of libphos came to: phos.h's phos_status, whose values never change. A later
// library may add codes, which this package reports as an *Error whose Status it has no name for.
type Status int

// The phos_status codes (phos.h), each with the HTTP status phosd answers for it.
const (
	StatusOK                 Status = 0
	StatusInvalidArgument    Status = 1  // the caller's arguments, or the request phosd was given (400)
	StatusNotFound           Status = 2  // no such function, instance or artifact (404)
	StatusAlreadyExists      Status = 3  // a function of that name is deployed (409 on deploy)
	StatusFailedPrecondition Status = 4  // phosd is not in a state where the call can run (409, 412)
	StatusUnavailable        Status = 5  // phosd unreachable, or stopping (503)
	StatusUnauthenticated    Status = 6  // the call needs a token and bore none (401)
	StatusPermissionDenied   Status = 7  // the token is not the one the call needs (403)
	StatusTimeout            Status = 8  // a deadline passed (504)
	StatusFunctionError      Status = 9  // the function itself failed the request (invoke: 400, 500)
	StatusInstanceLost       Status = 10 // the instance serving the request ended (502), or a stream was cut short
	StatusTooManyRequests    Status = 11 // phosd refused more work for now (429)
	StatusNotSupported       Status = 12 // not built, or not in this version (501)
	StatusInternal           Status = 13 // phosd or libphos broke an invariant (500)
)

var statusNames = [...]string{
	"OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION", "UNAVAILABLE",
	"UNAUTHENTICATED", "PERMISSION_DENIED", "TIMEOUT", "FUNCTION_ERROR", "INSTANCE_LOST",
	"TOO_MANY_REQUESTS", "NOT_SUPPORTED", "INTERNAL",
}

// String is phos_status_name without its "PHOS_" prefix ("NOT_FOUND"), or "status N" for a code
// this package does not know.
func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status %d", int(s))
}

// Error is a failed call: its Status and why, phos_last_error() of the call (or this package's own
// reason for arguments it refused before calling libphos, with StatusInvalidArgument).
//
// Match a status with errors.Is and the sentinels below (errors.Is(err, phos.ErrNotFound)), or take
// the *Error with errors.As for its Message.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string { return e.Status.String() + ": " + e.Message }

// Unwrap gives the sentinel of e's status, so that errors.Is matches it; nil for a code this package
// does not know.
func (e *Error) Unwrap() error {
	if e.Status > 0 && int(e.Status) < len(sentinels) {
		return sentinels[e.Status]
	}
	return nil
}

// The sentinels errors.Is matches an *Error against, one per failing status.
var (
	ErrInvalidArgument    = errors.New("phos: invalid argument")
	ErrNotFound           = errors.New("phos: not found")
	ErrAlreadyExists      = errors.New("phos: already exists")
	ErrFailedPrecondition = errors.New("phos: failed precondition")
	ErrUnavailable        = errors.New("phos: unavailable")
	ErrUnauthenticated    = errors.New("phos: unauthenticated")
	ErrPermissionDenied   = errors.New("phos: permission denied")
	ErrTimeout            = errors.New("phos: timeout")
	ErrFunctionError      = errors.New("phos: function error")
	ErrInstanceLost       = errors.New("phos: instance lost")
	ErrTooManyRequests    = errors.New("phos: too many requests")
	ErrNotSupported       = errors.New("phos: not supported")
	ErrInternal           = errors.New("phos: internal")
)

// Indexed by Status; StatusOK has none.
var sentinels = [...]error{
	nil, ErrInvalidArgument, ErrNotFound, ErrAlreadyExists, ErrFailedPrecondition, ErrUnavailable,
	ErrUnauthenticated, ErrPermissionDenied, ErrTimeout, ErrFunctionError, ErrInstanceLost,
	ErrTooManyRequests, ErrNotSupported, ErrInternal,
}

// ErrClosed is returned by calls on a Client or Runtime after its Close, and by InvokeStream when
// the client was closed while pieces were still arriving.
var ErrClosed = errors.New("phos: closed")

func invalidArgument(format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf(format, args...)}
}
