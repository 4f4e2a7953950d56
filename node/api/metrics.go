package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// UnmatchedRoute is the route label of a request no route served: one
// refused before routing (401 without the token), or one the mux found
// no route for (404, 405).
const UnmatchedRoute = "unmatched"

// Instrument counts the requests h serves in reg: gpumesh_api_requests_total
// by route and status code, and gpumesh_api_request_duration_seconds by
// route. The route is the ServeMux pattern that served the request ("GET
// /api/v1/jobs/{id}"), never its path, so that a label has as many values
// as there are routes; h must pass the request it is given, not a copy,
// down to its ServeMux (NewHandler's RequireToken does), which sets the
// request's Pattern.
func Instrument(h http.Handler, reg prometheus.Registerer) (http.Handler, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "gpumesh", Name: "api_requests_total",
		Help: "Requests to the node's HTTP API, by route pattern and status code.",
	}, []string{"route", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "gpumesh", Name: "api_request_duration_seconds",
		Help:    "Time the node's HTTP API took to answer, by route pattern (a followed log counts until it ends).",
		Buckets: []float64{.001, .005, .025, .1, .5, 2.5, 10, 60},
	}, []string{"route"})
	for _, c := range []prometheus.Collector{requests, duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("api: metrics: %w", err)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = UnmatchedRoute
		}
		requests.WithLabelValues(route, strconv.Itoa(sw.code())).Inc()
		duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}), nil
}

// statusWriter remembers the status code written through it. It flushes
// through (a followed log is flushed as it is written), and
// http.ResponseController reaches what it wraps with Unwrap.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are interim
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the status the handler answered with: 200 if it wrote nothing.
func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
