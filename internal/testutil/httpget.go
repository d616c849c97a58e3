package testutil

import "testing"

// httpGet fetches its first argument as an ordinary client in a sandbox
// would: through the proxy its environment names (HTTPS_PROXY), trusting
// SSL_CERT_FILE, with each further argument ("Name: value") as a header.
// It prints the status and the body, or the error.
const httpGet = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func main() {
	req, err := http.NewRequest(http.MethodGet, os.Args[1], nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	for _, h := range os.Args[2:] {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	fmt.Println("HTTP", resp.StatusCode)
	_, _ = io.Copy(os.Stdout, resp.Body)
}
`

// HTTPGet builds httpGet as a static Linux program and returns it.
func HTTPGet(t testing.TB) []byte {
	t.Helper()
	return buildStatic(t, "httpget", httpGet)
}
