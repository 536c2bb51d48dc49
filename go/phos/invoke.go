package phos

/*
#include <stdlib.h>
#include "phos_go.h"
*/
import "C"

import (
	"bytes"
	"runtime/cgo"
	"time"
	"unsafe"
)

// RestoreMode is how a new instance is brought up when an invocation needs one (README, "Restore
// modes"); libphos refuses another name with ErrInvalidArgument.
type RestoreMode string

const (
	RestoreAuto         RestoreMode = "auto"
	RestoreColdBoot     RestoreMode = "cold-boot"
	RestoreStopTheWorld RestoreMode = "stop-the-world"
	RestoreEager        RestoreMode = "eager"
	RestoreNoPool       RestoreMode = "no-pool"
	RestoreNoOrder      RestoreMode = "no-order"
	RestorePhos         RestoreMode = "phos"
	RestoreWarm         RestoreMode = "warm"
)

// InvokeOptions is how one invocation is served (phos_invoke_options); nil: the defaults.
type InvokeOptions struct {
	// RestoreMode: how a new instance is brought up if one is needed. Default: "", auto.
	RestoreMode RestoreMode
	// Timeout: the invocation's deadline, in whole milliseconds (a part of one counts as one),
	// enforced by phosd; 0: phosd's --invoke-timeout-ms. Default: 0.
	Timeout time.Duration
}

// Served says how phosd served an invocation (its X-Phos-* headers).
type Served struct {
	// RestoreMode: the mode that served it ("warm" for an idle instance, "phos", ...); "" when
	// phosd did not say.
	RestoreMode RestoreMode
	// FirstByte: from the request's arrival to the answer's first byte, for an instance brought up
	// for this request; -1 when phosd did not say (a warm instance).
	FirstByte time.Duration
}

// Answer is an invocation's whole answer and how it was served.
type Answer struct {
	Body []byte
	Served
}

func invokeOptions(options *InvokeOptions, m *cMemory) (C.phos_invoke_options, error) {
	var o C.phos_invoke_options
	o.struct_size = C.size_t(unsafe.Sizeof(o))
	if options == nil {
		return o, nil
	}
	var err error
	if o.restore_mode, err = m.optionalText(string(options.RestoreMode), "the restore mode"); err != nil {
		return o, err
	}
	o.timeout_ms, err = milliseconds(options.Timeout, "Timeout")
	return o, err
}

// newInfo is a phos_invoke_info that says "not said" until libphos fills it in (a failed call may
// leave it untouched, and a zero first_byte_us would read as 0 µs).
func newInfo() C.phos_invoke_info {
	var info C.phos_invoke_info
	info.struct_size = C.size_t(unsafe.Sizeof(info))
	info.first_byte_us = -1
	return info
}

func served(info *C.phos_invoke_info) Served {
	// The mode is NUL-terminated within its 32 bytes; bounded here all the same.
	mode := unsafe.Slice((*byte)(unsafe.Pointer(&info.restore_mode[0])), len(info.restore_mode))
	if end := bytes.IndexByte(mode, 0); end >= 0 {
		mode = mode[:end]
	}
	s := Served{RestoreMode: RestoreMode(mode), FirstByte: -1}
	if info.first_byte_us >= 0 {
		s.FirstByte = time.Duration(info.first_byte_us) * time.Microsecond
	}
	return s
}

// Invoke invokes function name with request and returns its whole answer. The function's own
// refusal or failure is ErrFunctionError, its message the function's.
func (c *Client) Invoke(name string, request []byte, options *InvokeOptions) (*Answer, error) {
	var m cMemory
	defer m.free()
	cName, err := m.text(name, "name")
	if err != nil {
		return nil, err
	}
	o, err := invokeOptions(options, &m)
	if err != nil {
		return nil, err
	}
	handle, err := c.begin()
	if err != nil {
		return nil, err
	}
	defer c.end()
	info := newInfo()
	body, length := bytesArgument(request)
	var response unsafe.Pointer
	var responseLen C.size_t
	var message *C.char
	status := C.phos_go_invoke(handle, cName, body, length, &o, &response, &responseLen, &info, &message)
	if err := failure(status, message); err != nil {
		return nil, err
	}
	return &Answer{Body: takeBytes(response, responseLen), Served: served(&info)}, nil
}

// stream is one InvokeStream call as its pieces' callback sees it, through a cgo.Handle.
type stream struct {
	client  *Client
	onPiece func(piece []byte) error
	err     error // what onPiece returned that stopped the pieces
	closed  bool  // the client's Close stopped the pieces
	// A panic of onPiece, raised again once the C call has returned: unwinding through libphos's
	// frames would skip its cleanup (phos.h: callbacks must not throw or longjmp out).
	panicked   bool
	panicValue any
}

// phosGoPiece is phos_invoke_stream's callback (phos_go.c): nonzero stops the pieces.
//
//export phosGoPiece
func phosGoPiece(handle C.uintptr_t, data unsafe.Pointer, length C.size_t) (stop C.int) {
	s := cgo.Handle(handle).Value().(*stream)
	if s.client.closing.Load() {
		s.closed = true
		return 1
	}
	defer func() {
		if r := recover(); r != nil {
			s.panicked, s.panicValue = true, r
			stop = 1
		}
	}()
	// A copy: libphos's buffer is reused once the callback returns, and the piece is the caller's.
	piece := append([]byte{}, unsafe.Slice((*byte)(data), int(length))...)
	if err := s.onPiece(piece); err != nil {
		s.err = err
		return 1
	}
	return 0
}

// InvokeStream invokes as Invoke does, handing the answer to onPiece piece by piece as it arrives
// (a function that answers in pieces: each as soon as phosd forwards it; one that answers at once:
// one or more pieces), on the calling goroutine. Each piece is a new slice onPiece may keep.
//
// When onPiece returns an error, it is not called again and InvokeStream returns that error once
// phosd's answer has ended (libphos reads the rest and drops it: it cannot end a transfer early).
// A panic in onPiece is raised again from InvokeStream, after the call has returned. onPiece must
// not call runtime.Goexit (t.FailNow, t.Fatal in a test): nothing can stop it from unwinding
// through libphos. A Close of the client stops the pieces too: InvokeStream then returns ErrClosed.
// An answer phosd cuts short after it began is ErrInstanceLost.
//
// The Served is how the call was served, as far as phosd said before it failed.
func (c *Client) InvokeStream(name string, request []byte, options *InvokeOptions,
	onPiece func(piece []byte) error) (Served, error) {
	notSaid := Served{FirstByte: -1}
	if onPiece == nil {
		return notSaid, invalidArgument("InvokeStream needs a function to take the pieces")
	}
	var m cMemory
	defer m.free()
	cName, err := m.text(name, "name")
	if err != nil {
		return notSaid, err
	}
	o, err := invokeOptions(options, &m)
	if err != nil {
		return notSaid, err
	}
	handle, err := c.begin()
	if err != nil {
		return notSaid, err
	}
	defer c.end()
	s := &stream{client: c, onPiece: onPiece}
	h := cgo.NewHandle(s)
	defer h.Delete()
	info := newInfo()
	body, length := bytesArgument(request)
	var message *C.char
	status := C.phos_go_invoke_stream(handle, cName, body, length, &o, C.uintptr_t(h), &info, &message)
	callErr := failure(status, message)
	if s.panicked {
		panic(s.panicValue)
	}
	switch {
	case s.err != nil:
		return served(&info), s.err
	case callErr != nil:
		return served(&info), callErr
	case s.closed:
		return served(&info), ErrClosed
	}
	return served(&info), nil
}
