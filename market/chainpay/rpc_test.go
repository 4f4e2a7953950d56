package chainpay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReaderRefusesBadAnswers: an endpoint that answers an error, a
// wrong-sized result, a value past int64, garbage, an oversized body or
// an HTTP error is refused with ErrRPC, never read as a balance. (The
// chain module's TestReaderReadsTheContract reads a real contract.)
func TestReaderRefusesBadAnswers(t *testing.T) {
	word := strings.Repeat("0", 64)
	big := strings.Repeat("0", 30) + "01" + strings.Repeat("0", 32) // 2^128-ish
	cases := map[string]func(w http.ResponseWriter){
		"rpc error": func(w http.ResponseWriter) {
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"execution reverted"}}`)
		},
		"short": func(w http.ResponseWriter) { fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":"0x%s"}`, word) },
		"over int64": func(w http.ResponseWriter) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":"0x%s%s%s"}`, big, word, word)
		},
		"not hex":     func(w http.ResponseWriter) { fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":"0xzz"}`) },
		"garbage":     func(w http.ResponseWriter) { fmt.Fprint(w, `<html>`) },
		"oversized":   func(w http.ResponseWriter) { fmt.Fprint(w, strings.Repeat(" ", maxRPCResponse+10)) },
		"http 502":    func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) },
		"result type": func(w http.ResponseWriter) { fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":42}`) },
	}
	for name, answer := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { answer(w) }))
		r, err := NewReader(srv.URL, testDomain, ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.Channel(context.Background(), fill(1), fill(2), [32]byte{}); !errors.Is(err, ErrRPC) {
			t.Errorf("%s: %v, want ErrRPC", name, err)
		}
		srv.Close()
	}
	if _, err := NewReader("ftp://x", testDomain, ReaderOptions{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("ftp url: %v", err)
	}
}
