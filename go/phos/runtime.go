package phos

/*
#include <stdlib.h>
#include "phos_go.h"
*/
import "C"

import (
	"os/signal"
	"sync"
	"syscall"
	"unsafe"
)

// RuntimeOptions is the daemon OpenRuntime runs in this process (phos_runtime_options): phosd's
// flags of the same names, with phosd's defaults.
type RuntimeOptions struct {
	// DataDir: its data directory (functions.json, the snapshot store, logs, gpu.sock,
	// admin.token); made if missing. Required.
	DataDir string
	// GPU: "sim", "cuda" or "auto" (cuda when NVIDIA's driver loads). Default: "", auto.
	GPU string
	// FunctionsDirs: directories whose executables deploys may name. Default: none,
	// DataDir/functions.
	FunctionsDirs []string
	// Listen: where its HTTP API listens for other processes, "HOST:PORT" (port 0: a free one).
	// Default: "", a free loopback port (Endpoint says which).
	Listen string
	// LogLevel: "trace", "debug", "info", "warn", "error" or "off", what it logs on standard error.
	// Default: "", warn.
	LogLevel string
	// Sandbox: "auto", "on" or "off", whether functions run sandboxed (phosd --sandbox). Default:
	// "", auto.
	Sandbox string
}

// Runtime is phos's daemon (pools, store, API server, instances: what phosd runs) inside this
// process, embedded mode. Connect gives clients of it, on which every Client method works as it
// does on a phosd. One process may run several, each on its own data directory.
type Runtime struct {
	mu       sync.Mutex
	handle   *C.phos_runtime
	endpoint string
	clients  map[*Client]struct{} // made by Connect and not closed yet
	closed   bool
	// closeOnce: a second Close returns once the first has.
	closeOnce sync.Once
}

// OpenRuntime starts the daemon in this process and returns once it serves. libphos.so must lie
// beside the simgpu library and module images (a build's lib directory) for GPU "sim".
//
// It ignores SIGPIPE for the whole process (signal.Ignore), as phos_runtime_open does for a C host
// that left SIGPIPE at its default: the daemon's threads write to sockets and pipes whose other end
// may have gone (a function that died mid-answer), and Go's runtime ends the process for a SIGPIPE
// raised on a thread it did not start (os/signal, "Go programs that use cgo or SWIG"). libphos does
// not do it here itself because the Go runtime's handler is installed. A program that wants SIGPIPE
// may call signal.Notify for it after OpenRuntime: Go then delivers it on the channel instead.
func OpenRuntime(options RuntimeOptions) (*Runtime, error) {
	var m cMemory
	defer m.free()
	var o C.phos_runtime_options
	o.struct_size = C.size_t(unsafe.Sizeof(o))
	var err error
	if o.data_dir, err = m.text(options.DataDir, "DataDir"); err != nil {
		return nil, err
	}
	if o.gpu, err = m.optionalText(options.GPU, "GPU"); err != nil {
		return nil, err
	}
	if o.functions_dirs, err = m.texts(options.FunctionsDirs, "a functions directory"); err != nil {
		return nil, err
	}
	o.functions_dir_count = C.size_t(len(options.FunctionsDirs))
	if o.listen, err = m.optionalText(options.Listen, "Listen"); err != nil {
		return nil, err
	}
	if o.log_level, err = m.optionalText(options.LogLevel, "LogLevel"); err != nil {
		return nil, err
	}
	if o.sandbox, err = m.optionalText(options.Sandbox, "Sandbox"); err != nil {
		return nil, err
	}
	signal.Ignore(syscall.SIGPIPE)
	var handle *C.phos_runtime
	var message *C.char
	if err := failure(C.phos_go_runtime_open(&o, &handle, &message), message); err != nil {
		return nil, err
	}
	return &Runtime{
		handle:   handle,
		endpoint: C.GoString(C.phos_runtime_endpoint(handle)),
		clients:  map[*Client]struct{}{},
	}, nil
}

// Endpoint is where other processes reach its HTTP API, "http://HOST:PORT" (they need the admin
// token in DataDir/admin.token for what needs it).
func (r *Runtime) Endpoint() string { return r.endpoint }

// Connect gives a client of the runtime, bearing its admin token. Close the client when done with
// it; Runtime.Close closes those still open.
func (r *Runtime) Connect() (*Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	var handle *C.phos_client
	var message *C.char
	if err := failure(C.phos_go_runtime_connect(r.handle, &handle, &message), message); err != nil {
		return nil, err
	}
	c := newClient(handle, r)
	r.clients[c] = struct{}{}
	return c, nil
}

func (r *Runtime) forget(c *Client) {
	r.mu.Lock()
	delete(r.clients, c)
	r.mu.Unlock()
}

// Close closes the clients Connect gave that are still open (each waiting for its calls under
// way: libphos frees a runtime only after every call on its clients has returned), then ends the
// runtime's instances, stops it and frees it. A second Close waits for the first and returns nil.
func (r *Runtime) Close() error {
	var err error
	r.closeOnce.Do(func() { err = r.close() })
	return err
}

func (r *Runtime) close() error {
	r.mu.Lock()
	r.closed = true
	open := make([]*Client, 0, len(r.clients))
	for c := range r.clients {
		open = append(open, c)
	}
	r.mu.Unlock()

	var first error
	for _, c := range open {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	var message *C.char
	if err := failure(C.phos_go_runtime_close(r.handle, &message), message); err != nil && first == nil {
		first = err
	}
	r.handle = nil
	return first
}
