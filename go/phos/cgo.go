package phos

// libphos by name only: where it lies (-L, -Wl,-rpath) and where phos.h lies (-I) come from
// CGO_LDFLAGS and CGO_CFLAGS (README.md), not from paths written here that hold for one tree only.

/*
#cgo LDFLAGS: -lphos
#include <stdlib.h>
#include "phos_go.h"
*/
import "C"

import (
	"encoding/json"
	"strings"
	"unsafe"
)

// cMemory is what one call hands to C, freed together once the call has returned. Strings and
// arrays of them live in C's heap: cgo lets C hold no Go pointer inside memory it is given.
type cMemory struct {
	blocks []unsafe.Pointer
}

func (m *cMemory) free() {
	for _, block := range m.blocks {
		C.free(block)
	}
	m.blocks = nil
}

// text is s as NUL-terminated text. A NUL inside s is refused: C would read s only up to it.
func (m *cMemory) text(s, what string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, invalidArgument("%s holds a NUL byte", what)
	}
	p := C.CString(s)
	m.blocks = append(m.blocks, unsafe.Pointer(p))
	return p, nil
}

// optionalText is text, with "" as NULL: phos.h's "NULL: the default".
func (m *cMemory) optionalText(s, what string) (*C.char, error) {
	if s == "" {
		return nil, nil
	}
	return m.text(s, what)
}

// texts is list as a C array of texts (NULL for an empty list).
func (m *cMemory) texts(list []string, what string) (**C.char, error) {
	if len(list) == 0 {
		return nil, nil
	}
	array := (**C.char)(C.malloc(C.size_t(len(list)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	m.blocks = append(m.blocks, unsafe.Pointer(array))
	items := unsafe.Slice(array, len(list))
	for i, s := range list {
		p, err := m.text(s, what)
		if err != nil {
			return nil, err
		}
		items[i] = p
	}
	return array, nil
}

// bytesArgument is b for a call that only reads it while it runs: Go memory holding no pointers,
// which cgo lets C read for the call's duration, so the request is not copied.
func bytesArgument(b []byte) (unsafe.Pointer, C.size_t) {
	if len(b) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&b[0]), C.size_t(len(b))
}

// failure is the *Error of a phos_go_* call's status and copied message (which it frees); nil for
// PHOS_OK.
func failure(status C.phos_status, message *C.char) error {
	if message != nil {
		defer C.free(unsafe.Pointer(message))
	}
	if status == C.PHOS_OK {
		return nil
	}
	text := ""
	if message != nil {
		text = C.GoString(message)
	}
	return &Error{Status: Status(status), Message: text}
}

// takeText is the NUL-terminated text libphos returned at p, released here.
func takeText(p *C.char) string {
	if p == nil {
		return ""
	}
	defer C.phos_free(unsafe.Pointer(p))
	return C.GoString(p)
}

// takeBytes is a copy of the n bytes libphos returned at p, released here.
func takeBytes(p unsafe.Pointer, n C.size_t) []byte {
	if p == nil {
		return []byte{}
	}
	defer C.phos_free(p)
	return append([]byte{}, unsafe.Slice((*byte)(p), int(n))...)
}

// takeJSON is phosd's JSON answer at p, released here; an answer that is not JSON is StatusInternal,
// so that callers may unmarshal what they are given without checking it again.
func takeJSON(p *C.char, what string) (json.RawMessage, error) {
	text := takeText(p)
	if !json.Valid([]byte(text)) {
		if len(text) > 200 {
			text = text[:200]
		}
		return nil, &Error{Status: StatusInternal, Message: what + ": phosd's answer is not JSON: " + text}
	}
	return json.RawMessage(text), nil
}
