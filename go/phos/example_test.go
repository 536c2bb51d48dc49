package phos_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"phos.dev/phos"
)

// Compiled by go test, not run (it has no Output comment): it needs a phosd at 127.0.0.1:7070.
func Example() {
	token, _ := os.ReadFile("/tmp/phos/admin.token")
	client, err := phos.Connect("http://127.0.0.1:7070", strings.TrimSpace(string(token)))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	_, err = client.Deploy(phos.DeployOptions{Name: "mlp", Executable: "build/bin/functions/mlp",
		Args: []string{"--size-mib", "64"}, Instances: 1})
	if err != nil {
		log.Fatal(err)
	}
	answer, err := client.Invoke("mlp", []byte(`{"seed": 7}`), &phos.InvokeOptions{RestoreMode: phos.RestorePhos})
	if err != nil {
		log.Fatal(err)
	}
	var result struct{ Argmax []int }
	_ = json.Unmarshal(answer.Body, &result)
	fmt.Println(result.Argmax, answer.RestoreMode, answer.FirstByte)
	_, err = client.InvokeStream("mlp", []byte(`{"seed": 7, "full": true}`), nil, func(piece []byte) error {
		fmt.Println(len(piece), "bytes")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Invoke("nothing-here", []byte("{}"), nil); errors.Is(err, phos.ErrNotFound) {
		fmt.Println(err) // NOT_FOUND: invoke 'nothing-here': ...
	}
	_ = client.Remove("mlp")
}
