package phos

/*
#include <stdlib.h>
#include "phos_go.h"
*/
import "C"

import (
	"encoding/json"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Client is a phosd reached through libphos: one method per phos_* call of client mode.
//
// A Client may be used from many goroutines at once. Close waits for the calls under way, then
// releases it; calls after Close return ErrClosed.
//
// No method takes a context.Context. libphos cannot cancel a call once it has begun, and a method
// that returned early on cancellation would leave the C call running, still holding the client, with
// no one to wait for it. Deadlines are InvokeOptions.Timeout, which phosd enforces.
type Client struct {
	mu      sync.Mutex
	changed *sync.Cond // calls reached 0, or handle was released
	calls   int        // calls under way
	closed  bool
	// closing is closed as an atomic, for InvokeStream's callback to read once per piece without
	// taking mu.
	closing atomic.Bool
	handle  *C.phos_client
	runtime *Runtime // the Runtime whose Connect made it; nil from phos.Connect
}

func newClient(handle *C.phos_client, runtime *Runtime) *Client {
	c := &Client{handle: handle, runtime: runtime}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Connect opens a client of the phosd at endpoint, "http://HOST:PORT" or "unix:///PATH" (phosd
// --listen-unix), and checks that it answers. Calls bear token (the admin token for deploys,
// removals, Describe and checkpoints; a function's invoke token, or the admin token, for invoke;
// "" for none).
//
// An endpoint where nothing answers is ErrUnavailable, another form ErrInvalidArgument.
func Connect(endpoint, token string) (*Client, error) {
	var m cMemory
	defer m.free()
	cEndpoint, err := m.text(endpoint, "endpoint")
	if err != nil {
		return nil, err
	}
	cToken, err := m.optionalText(token, "token")
	if err != nil {
		return nil, err
	}
	var handle *C.phos_client
	var message *C.char
	if err := failure(C.phos_go_connect(cEndpoint, cToken, &handle, &message), message); err != nil {
		return nil, err
	}
	return newClient(handle, nil), nil
}

// begin counts a call under way and gives the handle it uses; ErrClosed once Close has begun.
func (c *Client) begin() (*C.phos_client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.calls++
	return c.handle, nil
}

func (c *Client) end() {
	c.mu.Lock()
	c.calls--
	if c.calls == 0 {
		c.changed.Broadcast()
	}
	c.mu.Unlock()
}

// Close waits for the calls under way (an InvokeStream's callback is not called again once Close
// has begun; its call returns when phosd's answer has ended), then releases the client. A second
// Close waits for the first and returns nil. Calling Close from inside an InvokeStream callback of
// the same client never returns: it waits for that call.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		for c.handle != nil {
			c.changed.Wait()
		}
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.closing.Store(true)
	for c.calls > 0 {
		c.changed.Wait()
	}
	handle := c.handle
	c.mu.Unlock()

	var message *C.char
	err := failure(C.phos_go_close(handle, &message), message)

	c.mu.Lock()
	c.handle = nil
	c.changed.Broadcast()
	c.mu.Unlock()
	if c.runtime != nil {
		c.runtime.forget(c)
	}
	return err
}

// DeployOptions is a function to deploy (phos_deploy_options). Fields left zero take their
// defaults.
type DeployOptions struct {
	// Name: letters, digits, '_', '-' and '.'. Required.
	Name string
	// Executable: a path under one of phosd's --functions-dir, on phosd's machine (relative paths
	// from this process's working directory). Required.
	Executable string
	// Upload: this process reads Executable and uploads it to phosd (kept by its SHA-256), so it may
	// lie anywhere this process can read. Default: false.
	Upload bool
	// Args: its arguments, after the program name. Default: none.
	Args []string
	// Instances phosd keeps running (warm); 0: none until a request comes. Default: 0.
	Instances int
	// MaxInstances: the most instances at once, warm ones included; 0: Instances (at least 1).
	// Default: 0.
	MaxInstances int
	// GPUs: devices each instance uses; 0: 1. Default: 0.
	GPUs int
	// SampleRequest: run once deployed, so phosd learns the order in which the function first
	// touches its buffers. Default: "", none.
	SampleRequest string
	// SampleTimeout: the sample request's deadline, whole milliseconds; 0: phosd's. Default: 0.
	SampleTimeout time.Duration
}

// cInt is n as a C int, refused when it does not fit (a conversion would wrap it).
func cInt(n int, what string) (C.int, error) {
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, invalidArgument("%s %d does not fit a C int", what, n)
	}
	return C.int(n), nil
}

// milliseconds is d as phos.h's uint32 milliseconds, 0 for 0; a positive d under 1 ms is 1 ms rather
// than 0, which would mean phosd's default.
func milliseconds(d time.Duration, what string) (C.uint32_t, error) {
	if d < 0 {
		return 0, invalidArgument("%s %v is negative", what, d)
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return 0, invalidArgument("%s %v exceeds %d ms", what, d, uint32(math.MaxUint32))
	}
	return C.uint32_t(ms), nil
}

// Deploy deploys a function and returns once its snapshots are committed, with phosd's answer: the
// spec, what became of the sample request ("sample": {"ok", "first_touch_learned", "error"}) and
// "contexts_ready".
func (c *Client) Deploy(options DeployOptions) (json.RawMessage, error) {
	var m cMemory
	defer m.free()
	var o C.phos_deploy_options
	o.struct_size = C.size_t(unsafe.Sizeof(o))
	var err error
	if o.name, err = m.text(options.Name, "name"); err != nil {
		return nil, err
	}
	if o.executable, err = m.text(options.Executable, "executable"); err != nil {
		return nil, err
	}
	if options.Upload {
		o.upload = 1
	}
	if o.args, err = m.texts(options.Args, "an argument"); err != nil {
		return nil, err
	}
	o.arg_count = C.size_t(len(options.Args))
	if o.instances, err = cInt(options.Instances, "Instances"); err != nil {
		return nil, err
	}
	if o.max_instances, err = cInt(options.MaxInstances, "MaxInstances"); err != nil {
		return nil, err
	}
	if o.gpus, err = cInt(options.GPUs, "GPUs"); err != nil {
		return nil, err
	}
	if o.sample_request, err = m.optionalText(options.SampleRequest, "the sample request"); err != nil {
		return nil, err
	}
	if o.sample_timeout_ms, err = milliseconds(options.SampleTimeout, "SampleTimeout"); err != nil {
		return nil, err
	}
	handle, err := c.begin()
	if err != nil {
		return nil, err
	}
	defer c.end()
	var answer, message *C.char
	if err := failure(C.phos_go_deploy(handle, &o, &answer, &message), message); err != nil {
		return nil, err
	}
	return takeJSON(answer, "deploy '"+options.Name+"'")
}

// List is the deployed functions: {"functions": [spec + "state", ...]} (environment values redacted
// unless the client bears the admin token).
func (c *Client) List() (json.RawMessage, error) {
	handle, err := c.begin()
	if err != nil {
		return nil, err
	}
	defer c.end()
	var answer, message *C.char
	if err := failure(C.phos_go_list(handle, &answer, &message), message); err != nil {
		return nil, err
	}
	return takeJSON(answer, "list")
}

// Describe is one function: {"function": its entry of List, "instances": [{"id", "state", "pid",
// "mode", "restored", "device"}, ...]}. Needs the admin token.
func (c *Client) Describe(name string) (json.RawMessage, error) {
	var m cMemory
	defer m.free()
	cName, err := m.text(name, "name")
	if err != nil {
		return nil, err
	}
	handle, err := c.begin()
	if err != nil {
		return nil, err
	}
	defer c.end()
	var answer, message *C.char
	if err := failure(C.phos_go_describe(handle, cName, &answer, &message), message); err != nil {
		return nil, err
	}
	return takeJSON(answer, "describe '"+name+"'")
}

// Remove removes a function and ends its instances.
func (c *Client) Remove(name string) error {
	var m cMemory
	defer m.free()
	cName, err := m.text(name, "name")
	if err != nil {
		return err
	}
	handle, err := c.begin()
	if err != nil {
		return err
	}
	defer c.end()
	var message *C.char
	return failure(C.phos_go_remove(handle, cName, &message), message)
}

// CheckpointMode is how Checkpoint takes a running instance's snapshot (docs/design.md D10).
type CheckpointMode string

const (
	CheckpointStopTheWorld CheckpointMode = "stop-the-world"
	CheckpointSoftCOW      CheckpointMode = "soft-cow"
	CheckpointSoftRecopy   CheckpointMode = "soft-recopy"
)

// Checkpoint checkpoints a running instance of name (instance 0: an idle one phosd picks) in mode
// ("": stop-the-world) and returns once the new snapshot is committed, with {"function",
// "instance", "mode", "version", "stall_us", "total_us", ...}.
func (c *Client) Checkpoint(name string, instance uint64, mode CheckpointMode) (json.RawMessage, error) {
	var m cMemory
	defer m.free()
	cName, err := m.text(name, "name")
	if err != nil {
		return nil, err
	}
	cMode, err := m.optionalText(string(mode), "mode")
	if err != nil {
		return nil, err
	}
	handle, err := c.begin()
	if err != nil {
		return nil, err
	}
	defer c.end()
	var answer, message *C.char
	status := C.phos_go_checkpoint(handle, cName, C.uint64_t(instance), cMode, &answer, &message)
	if err := failure(status, message); err != nil {
		return nil, err
	}
	return takeJSON(answer, "checkpoint '"+name+"'")
}

// Stats is phosd's metrics (GET /metrics), Prometheus text.
func (c *Client) Stats() (string, error) {
	handle, err := c.begin()
	if err != nil {
		return "", err
	}
	defer c.end()
	var text, message *C.char
	if err := failure(C.phos_go_stats(handle, &text, &message), message); err != nil {
		return "", err
	}
	return takeText(text), nil
}
