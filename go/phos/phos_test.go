package phos

// phos for Go against a real phosd on simgpu, which TestMain starts: mlp deployed, invoked blocking,
// streamed and from many goroutines over one client, its answers checked against the CPU reference
// in mlp_reference_test.go; every refusal as its *Error; the client's lifetime.
//
// Where things are (CTest sets them; the defaults are the source tree's build/):
//   PHOS_TEST_PHOSD          phosd
//   PHOS_TEST_FUNCTIONS_DIR  phosd's --functions-dir, the directory holding mlp
//   PHOS_TEST_MLP            mlp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var paths = struct {
	phosd, functionsDir, mlp string
}{
	phosd:        fromEnv("PHOS_TEST_PHOSD", "../../build/bin/phosd"),
	functionsDir: fromEnv("PHOS_TEST_FUNCTIONS_DIR", "../../build/bin/functions"),
	mlp:          fromEnv("PHOS_TEST_MLP", "../../build/bin/functions/mlp"),
}

func fromEnv(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// phosd is a phosd on a data directory of its own, on simgpu, serving the build's functions.
type phosd struct {
	dir, logPath, endpoint, token string
	cmd                           *exec.Cmd
	exited                        chan struct{} // closed once cmd.Wait has returned
	waitErr                       error
}

var daemon *phosd

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startPhosd() (*phosd, error) {
	// The data directory itself is the temporary one, as tests/integration/phosd_fixture.cc makes
	// it: a sandboxed function's uid must reach phosd's gpu.sock and artifacts there, which a private
	// (0700) directory above the data directory would keep it from.
	dir, err := os.MkdirTemp("", "phosd-go-")
	if err != nil {
		return nil, err
	}
	d := &phosd{dir: dir, logPath: dir + ".log", exited: make(chan struct{})}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d.endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	log, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	d.cmd = exec.Command(paths.phosd, "--gpu", "sim", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--data-dir", dir, "--functions-dir", paths.functionsDir)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	// simgpu's small profile at real time, unless the caller chose otherwise (CTest sets them).
	d.cmd.Env = os.Environ()
	for _, kv := range []string{"PHOS_SIMGPU_PROFILE=ci", "PHOS_SIMGPU_TIME_SCALE=1"} {
		if name := kv[:strings.IndexByte(kv, '=')]; os.Getenv(name) == "" {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	if err := d.cmd.Start(); err != nil {
		d.remove()
		return nil, err
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitHealthy(2 * time.Minute); err != nil {
		_ = d.cmd.Process.Kill()
		<-d.exited
		tail := d.logTail()
		d.remove()
		return nil, fmt.Errorf("%v; phosd's log:\n%s", err, tail)
	}
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		return nil, err
	}
	d.token = strings.TrimSpace(string(token))
	return d, nil
}

// waitHealthy polls /healthz until phosd serves (the wait for a process to come up, not a wait
// standing in for an assertion), phosd exits, or the time is up.
func (d *phosd) waitHealthy(limit time.Duration) error {
	probe := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		if r, err := probe.Get(d.endpoint + "/healthz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-d.exited:
			return fmt.Errorf("phosd exited before it served: %v", d.waitErr)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("phosd did not serve /healthz within %v", limit)
		}
	}
}

// stop ends phosd with SIGTERM, as its operators do, and says how it exited.
func (d *phosd) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return errors.New("phosd did not stop within a minute of SIGTERM")
	}
	if d.waitErr != nil {
		return fmt.Errorf("phosd exited so when stopped: %v", d.waitErr)
	}
	return nil
}

func (d *phosd) logTail() string {
	text, _ := os.ReadFile(d.logPath)
	lines := strings.Split(string(text), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}

func (d *phosd) remove() {
	_ = os.RemoveAll(d.dir)
	_ = os.Remove(d.logPath)
}

func TestMain(m *testing.M) {
	d, err := startPhosd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting phosd:", err)
		os.Exit(1)
	}
	daemon = d
	code := m.Run()
	if err := d.stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "phosd's log (tail):\n%s\n", d.logTail())
	}
	d.remove()
	os.Exit(code)
}

func connect(t *testing.T, token string) *Client {
	t.Helper()
	client, err := Connect(daemon.endpoint, token)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		if err := client.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return client
}

// refused checks that err is an *Error of status want, errors.Is-matching sentinel, whose message
// holds each of says.
func refused(t *testing.T, err error, sentinel error, want Status, says ...string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want %v, got %v", want, err)
	}
	if e.Status != want || !errors.Is(err, sentinel) {
		t.Fatalf("want %v, got %v", want, err)
	}
	for _, s := range says {
		if !strings.Contains(e.Message, s) {
			t.Errorf("the message of %v does not say %q", err, s)
		}
	}
}

func decode(t *testing.T, raw json.RawMessage, into any) {
	t.Helper()
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("%v: %.300s", err, raw)
	}
}

// mlp deployed once by its path with one warm instance, then every call on it.
func TestMlp(t *testing.T) {
	client := connect(t, daemon.token)
	raw, err := client.Deploy(DeployOptions{Name: "mlp", Executable: paths.mlp, Args: mlpArgs, Instances: 1})
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}

	t.Run("deploy answers the spec and a second deploy is refused", func(t *testing.T) {
		var spec struct {
			Name          string          `json:"name"`
			Args          []string        `json:"args"`
			ContextsReady json.RawMessage `json:"contexts_ready"`
		}
		decode(t, raw, &spec)
		if spec.Name != "mlp" || strings.Join(spec.Args, " ") != strings.Join(mlpArgs, " ") || spec.ContextsReady == nil {
			t.Errorf("deploy answered %s", raw)
		}
		_, err := client.Deploy(DeployOptions{Name: "mlp", Executable: paths.mlp, Args: mlpArgs})
		refused(t, err, ErrAlreadyExists, StatusAlreadyExists, "mlp")
	})

	t.Run("a blocking answer matches the CPU reference", func(t *testing.T) {
		answer, err := client.Invoke("mlp", []byte(`{"seed": 7, "full": true}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMlp(t, answer.Body, 7, true)
		if answer.RestoreMode == "" {
			t.Error("phosd says which mode served every answer")
		}
	})

	t.Run("streamed pieces make the blocking answer", func(t *testing.T) {
		request := []byte(`{"seed": 9, "full": true}`)
		blocking, err := client.Invoke("mlp", request, nil)
		if err != nil {
			t.Fatal(err)
		}
		var pieces [][]byte
		served, err := client.InvokeStream("mlp", request, nil, func(piece []byte) error {
			if len(piece) == 0 {
				t.Error("an empty piece")
			}
			pieces = append(pieces, piece)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(pieces) == 0 {
			t.Fatal("no piece")
		}
		streamed := bytes.Join(pieces, nil)
		if !bytes.Equal(streamed, blocking.Body) {
			t.Errorf("%d pieces made %.200s; the blocking answer is %.200s", len(pieces), streamed, blocking.Body)
		}
		if served.RestoreMode == "" {
			t.Error("phosd says which mode served a stream")
		}
		checkMlp(t, streamed, 9, true)
	})

	t.Run("a callback's error stops the pieces and is returned", func(t *testing.T) {
		stop := errors.New("enough")
		calls := 0
		_, err := client.InvokeStream("mlp", []byte(`{"seed": 10, "full": true}`), nil, func([]byte) error {
			calls++
			return stop
		})
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("want the callback's error after one call, got %v after %d", err, calls)
		}
	})

	t.Run("a callback's panic is raised again once the call has returned", func(t *testing.T) {
		raised := func() (value any) {
			defer func() { value = recover() }()
			_, _ = client.InvokeStream("mlp", []byte(`{"seed": 11}`), nil, func([]byte) error { panic("boom") })
			return nil
		}()
		if raised != "boom" {
			t.Fatalf("want the panic \"boom\", got %v", raised)
		}
		// The call ended cleanly: the client serves on.
		answer, err := client.Invoke("mlp", []byte(`{"seed": 11}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMlp(t, answer.Body, 11, false)
	})

	t.Run("a restored instance says how and when", func(t *testing.T) {
		answer, err := client.Invoke("mlp", []byte(`{"seed": 8}`), &InvokeOptions{RestoreMode: RestorePhos})
		if err != nil {
			t.Fatal(err)
		}
		checkMlp(t, answer.Body, 8, false)
		if answer.RestoreMode != RestorePhos || answer.FirstByte < 0 {
			t.Errorf("served %+v; want mode phos and a first-byte time", answer.Served)
		}
	})

	t.Run("the function's refusal is a function error", func(t *testing.T) {
		_, err := client.Invoke("mlp", []byte(`{"input": [1, 2, 3]}`), nil)
		refused(t, err, ErrFunctionError, StatusFunctionError, "input")
		_, err = client.InvokeStream("mlp", []byte("not json"), nil, func([]byte) error { return nil })
		refused(t, err, ErrFunctionError, StatusFunctionError)
	})

	t.Run("one client serves many goroutines at once", func(t *testing.T) {
		var wg sync.WaitGroup
		answers := make([]*Answer, 8)
		errs := make([]error, 8)
		for i := range answers {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				answers[i], errs[i] = client.Invoke("mlp", []byte(fmt.Sprintf(`{"seed": %d}`, 100+i)), nil)
			}(i)
		}
		wg.Wait()
		for i, answer := range answers {
			if errs[i] != nil {
				t.Fatalf("seed %d: %v", 100+i, errs[i])
			}
			checkMlp(t, answer.Body, uint64(100+i), false)
		}
	})

	t.Run("listed, described, checkpointed and counted", func(t *testing.T) {
		raw, err := client.List()
		if err != nil {
			t.Fatal(err)
		}
		var listed struct {
			Functions []struct {
				Name string `json:"name"`
			} `json:"functions"`
		}
		decode(t, raw, &listed)
		found := false
		for _, f := range listed.Functions {
			found = found || f.Name == "mlp"
		}
		if !found {
			t.Errorf("mlp is not listed: %s", raw)
		}
		raw, err = client.Describe("mlp")
		if err != nil {
			t.Fatal(err)
		}
		var described struct {
			Function struct {
				Name  string          `json:"name"`
				State json.RawMessage `json:"state"`
			} `json:"function"`
			Instances []json.RawMessage `json:"instances"`
		}
		decode(t, raw, &described)
		if described.Function.Name != "mlp" || described.Function.State == nil || len(described.Instances) == 0 {
			t.Errorf("described %s", raw)
		}

		raw, err = client.Checkpoint("mlp", 0, CheckpointSoftCOW)
		if err != nil {
			t.Fatal(err)
		}
		var taken struct {
			Function string          `json:"function"`
			Mode     string          `json:"mode"`
			Version  json.RawMessage `json:"version"`
		}
		decode(t, raw, &taken)
		if taken.Function != "mlp" || taken.Mode != "soft-cow" || taken.Version == nil {
			t.Errorf("checkpoint answered %s", raw)
		}
		_, err = client.Checkpoint("mlp", 0, "sideways")
		refused(t, err, ErrInvalidArgument, StatusInvalidArgument)
		answer, err := client.Invoke("mlp", []byte(`{"seed": 4}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMlp(t, answer.Body, 4, false)

		stats, err := client.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stats, "phos_invocations_total") {
			t.Errorf("no phos_invocations_total in the metrics: %.300s", stats)
		}
	})

	t.Run("removed, it is not found", func(t *testing.T) {
		if err := client.Remove("mlp"); err != nil {
			t.Fatal(err)
		}
		_, err := client.Invoke("mlp", []byte(`{"seed": 3}`), nil)
		refused(t, err, ErrNotFound, StatusNotFound, "mlp")
		refused(t, client.Remove("mlp"), ErrNotFound, StatusNotFound, "mlp")
	})
}

func TestNothingOfThatNameIsNotFound(t *testing.T) {
	client := connect(t, daemon.token)
	calls := map[string]func() error{
		"invoke": func() error { _, err := client.Invoke("nothing-here", []byte("{}"), nil); return err },
		"invoke stream": func() error {
			served, err := client.InvokeStream("nothing-here", []byte("{}"), nil, func([]byte) error { return nil })
			if served.FirstByte != -1 || served.RestoreMode != "" {
				t.Errorf("a refused stream says it was served: %+v", served)
			}
			return err
		},
		"describe":   func() error { _, err := client.Describe("nothing-here"); return err },
		"remove":     func() error { return client.Remove("nothing-here") },
		"checkpoint": func() error { _, err := client.Checkpoint("nothing-here", 0, ""); return err },
	}
	for what, call := range calls {
		t.Run(what, func(t *testing.T) {
			err := call()
			refused(t, err, ErrNotFound, StatusNotFound, "nothing-here")
			if !strings.HasPrefix(err.Error(), "NOT_FOUND: ") {
				t.Errorf("Error() is %q", err.Error())
			}
		})
	}
}

// phos_last_error is per thread and goroutines move between threads: each failure must carry its
// own call's message, never another goroutine's.
func TestEachFailureCarriesItsOwnMessage(t *testing.T) {
	client := connect(t, daemon.token)
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = client.Invoke(fmt.Sprintf("absent-%d", i), []byte("{}"), nil)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		refused(t, err, ErrNotFound, StatusNotFound, fmt.Sprintf("'absent-%d'", i))
	}
}

func TestAWrongTokenIsPermissionDeniedAndNoneUnauthenticated(t *testing.T) {
	wrong := connect(t, "not-the-admin-token")
	_, err := wrong.Deploy(DeployOptions{Name: "mlp-denied", Executable: paths.mlp, Args: mlpArgs})
	refused(t, err, ErrPermissionDenied, StatusPermissionDenied, "403")
	refused(t, wrong.Remove("mlp-denied"), ErrPermissionDenied, StatusPermissionDenied)

	anonymous := connect(t, "")
	_, err = anonymous.Deploy(DeployOptions{Name: "mlp-denied", Executable: paths.mlp, Args: mlpArgs})
	refused(t, err, ErrUnauthenticated, StatusUnauthenticated)
	if _, err := anonymous.List(); err != nil {
		t.Errorf("listing is open: %v", err)
	}
}

func TestBadArgumentsAreRefused(t *testing.T) {
	client := connect(t, daemon.token)
	// By libphos or phosd.
	_, err := client.Invoke("mlp", []byte("{}"), &InvokeOptions{RestoreMode: "sometimes"})
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument, "sometimes")
	_, err = client.Invoke("a/b", []byte("{}"), nil)
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument)
	_, err = client.Deploy(DeployOptions{Name: "mlp", Executable: "/nonexistent/mlp", Upload: true})
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument)
	_, err = client.Deploy(DeployOptions{Name: "sh", Executable: "/bin/sh"}) // outside --functions-dir
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument, "400")

	// By this package, before anything is sent: what C types cannot carry.
	_, err = client.Invoke("ml\x00p", []byte("{}"), nil)
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument, "NUL")
	_, err = client.Invoke("mlp", []byte("{}"), &InvokeOptions{Timeout: -time.Second})
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument, "negative")
	_, err = client.Deploy(DeployOptions{Name: "mlp", Executable: paths.mlp, Instances: 1 << 40})
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument, "Instances")
	_, err = client.Deploy(DeployOptions{Name: "mlp", Executable: paths.mlp, Args: []string{"a\x00b"}})
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument, "NUL")
	_, err = client.InvokeStream("mlp", []byte("{}"), nil, nil)
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument)
}

func TestEndpointsPhosdIsNotAtOrNotOfThisVersion(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Connect(fmt.Sprintf("http://127.0.0.1:%d", port), "")
	refused(t, err, ErrUnavailable, StatusUnavailable)
	_, err = Connect("unix:///nonexistent/phosd.sock", "")
	refused(t, err, ErrUnavailable, StatusUnavailable)
	_, err = Connect("unix://relative.sock", "")
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument)
	_, err = Connect("ftp://127.0.0.1:7070", "")
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument)
}

func TestAClosedClientRefusesCalls(t *testing.T) {
	client, err := Connect(daemon.endpoint, daemon.token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.List(); err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.List(); err != ErrClosed {
		t.Errorf("List after Close: %v", err)
	}
	if _, err := client.Invoke("mlp", nil, nil); err != ErrClosed {
		t.Errorf("Invoke after Close: %v", err)
	}
	if _, err := client.InvokeStream("mlp", nil, nil, func([]byte) error { return nil }); err != ErrClosed {
		t.Errorf("InvokeStream after Close: %v", err)
	}
	if err := client.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func TestErrorsMatchTheirStatus(t *testing.T) {
	wrapped := fmt.Errorf("deploying: %w", &Error{Status: StatusTimeout, Message: "deploy 'x': 504"})
	if !errors.Is(wrapped, ErrTimeout) || errors.Is(wrapped, ErrNotFound) {
		t.Errorf("%v matches the wrong sentinels", wrapped)
	}
	if got := wrapped.Error(); got != "deploying: TIMEOUT: deploy 'x': 504" {
		t.Errorf("Error() is %q", got)
	}
	// A code a later library may add: an *Error all the same, matching no sentinel.
	unknown := &Error{Status: 14, Message: "new"}
	if unknown.Error() != "status 14: new" || unknown.Unwrap() != nil {
		t.Errorf("an unknown status reads %q", unknown.Error())
	}
	for s := StatusInvalidArgument; s <= StatusInternal; s++ {
		if !errors.Is(&Error{Status: s}, sentinels[s]) || strings.HasPrefix(s.String(), "status") {
			t.Errorf("status %d has no sentinel or name", int(s))
		}
	}
}
