package phos

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Embedded mode: the daemon inside this test's process, used through a client of it exactly as a
// phosd is (mlp deployed, invoked blocking and streamed, checked against the CPU reference,
// removed), reached from outside at its endpoint, then closed with a client still open.
func TestTheRuntimeRunsInThisProcessBehindTheSameAPI(t *testing.T) {
	// Not t.TempDir: its parent is private (0700), which a sandboxed function's uid could not pass
	// to reach gpu.sock in the data directory.
	dir, err := os.MkdirTemp("", "phos-go-embedded-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	runtime, err := OpenRuntime(RuntimeOptions{
		DataDir:       dir,
		GPU:           "sim",
		FunctionsDirs: []string{filepath.Dir(paths.mlp)},
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = runtime.Close()
		}
	})
	endpoint := runtime.Endpoint()
	if !strings.HasPrefix(endpoint, "http://127.0.0.1:") {
		t.Errorf("endpoint %q", endpoint)
	}
	client, err := runtime.Connect()
	if err != nil {
		t.Fatalf("connect: %v", err)
	}

	if _, err := client.Deploy(DeployOptions{Name: "mlp", Executable: paths.mlp, Args: mlpArgs, Instances: 1}); err != nil {
		t.Fatalf("deploy: %v", err)
	}
	request := []byte(`{"seed": 21}`)
	answer, err := client.Invoke("mlp", request, nil)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	checkMlp(t, answer.Body, 21, false)
	var streamed []byte
	if _, err := client.InvokeStream("mlp", request, nil, func(piece []byte) error {
		streamed = append(streamed, piece...)
		return nil
	}); err != nil {
		t.Fatalf("invoke stream: %v", err)
	}
	if string(streamed) != string(answer.Body) {
		t.Errorf("streamed %.200s; blocking %.200s", streamed, answer.Body)
	}

	// Other processes reach it at its endpoint, with the admin token of its data directory.
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	outside := connectTo(t, endpoint, strings.TrimSpace(string(token)))
	if _, err := outside.Describe("mlp"); err != nil {
		t.Errorf("describe from outside: %v", err)
	}
	if err := outside.Close(); err != nil {
		t.Error(err)
	}

	if err := client.Remove("mlp"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	_, err = client.Invoke("mlp", request, nil)
	refused(t, err, ErrNotFound, StatusNotFound)

	// Close closes the client left open, then the runtime: nothing answers there any more.
	closed = true
	if err := runtime.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := client.List(); !errors.Is(err, ErrClosed) {
		t.Errorf("a client of a closed runtime: %v", err)
	}
	if _, err := runtime.Connect(); !errors.Is(err, ErrClosed) {
		t.Errorf("Connect after Close: %v", err)
	}
	if r, err := http.Get(endpoint + "/healthz"); err == nil {
		r.Body.Close()
		t.Errorf("%s still answers after Close", endpoint)
	}
	if err := runtime.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func TestBadRuntimeOptionsAreRefusedWithTheirReason(t *testing.T) {
	_, err := OpenRuntime(RuntimeOptions{})
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument, "data_dir")
	_, err = OpenRuntime(RuntimeOptions{DataDir: filepath.Join(t.TempDir(), "never"), GPU: "quantum"})
	refused(t, err, ErrInvalidArgument, StatusInvalidArgument)
}

func connectTo(t *testing.T, endpoint, token string) *Client {
	t.Helper()
	client, err := Connect(endpoint, token)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	return client
}
