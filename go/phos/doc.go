// Package phos is a client of phosd, the serverless GPU cold-start runtime, over libphos's C API
// (phos.h) through cgo, in phos.h's two modes:
//
//   - client mode: Connect opens a Client of a phosd running elsewhere;
//   - embedded mode: OpenRuntime runs the daemon inside this process, and Runtime.Connect gives a
//     Client of it.
//
// Every failure is an *Error with libphos's Status and message, which errors.Is matches against
// ErrNotFound, ErrPermissionDenied and the other sentinels:
//
//	client, err := phos.Connect("http://127.0.0.1:7070", token)
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	answer, err := client.Invoke("mlp", []byte(`{"seed": 7}`), nil)
//	if errors.Is(err, phos.ErrNotFound) {
//		// not deployed
//	}
//
// Building needs phos.h and libphos.so: CGO_CFLAGS=-I<tree>/frontend/capi/include and
// CGO_LDFLAGS="-L<build>/lib -Wl,-rpath,<build>/lib" (go/README.md).
package phos
