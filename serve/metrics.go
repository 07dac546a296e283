package serve

import (
	"net/http"
	"strconv"

	"github.com/lm2lm/lm2lm/loop"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the service's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	repeats      prometheus.Counter
	failures     prometheus.Counter
	completions  *prometheus.CounterVec
	groups       *prometheus.CounterVec
	meanReward   prometheus.Gauge
	step         prometheus.Gauge
	calibrations prometheus.Gauge
	evidence     prometheus.Gauge
	realRuns     prometheus.Gauge
	monitor      *prometheus.GaugeVec
	// copyTime is how long each checkpoint's copy of the state held the
	// service's lock (scoring waits meanwhile), copyMax the longest.
	copyTime prometheus.Histogram
	copyMax  prometheus.Gauge
	longest  float64
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lm2lm_serve_requests_total", Help: "Requests answered, by route and HTTP status."}, []string{"route", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lm2lm_serve_request_seconds", Help: "Latency of successful requests, by route.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"route"})
	m.repeats = prometheus.NewCounter(prometheus.CounterOpts{Name: "lm2lm_serve_repeated_requests_total", Help: "Requests answered from the first result of the same request id."})
	m.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "lm2lm_serve_failed_groups_total", Help: "Groups answered with a failure reason instead of rewards."})
	m.completions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lm2lm_serve_completions_total", Help: "Completions scored, by validity."}, []string{"valid"})
	m.groups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lm2lm_serve_groups_total", Help: "Groups scored, by dynamic sampling verdict (kept or flat)."}, []string{"verdict"})
	m.meanReward = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lm2lm_serve_mean_reward", Help: "Mean shaped reward of the last scored group."})
	m.step = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lm2lm_step", Help: "The trainer's step as the service knows it."})
	m.calibrations = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lm2lm_calibrations", Help: "Calibration points executed."})
	m.evidence = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lm2lm_evidence_records", Help: "Real records in M."})
	m.realRuns = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lm2lm_real_runs", Help: "Calibration runs paid for."})
	m.monitor = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lm2lm_monitor", Help: "Reliability monitors of the last calibration (delta_m, gap, advantage_cosine, pairwise_accuracy)."}, []string{"monitor"})
	m.copyTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lm2lm_serve_checkpoint_copy_seconds",
		Help: "Time a checkpoint's copy of the state holds scoring up (the encoding and writing do not).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.copyMax = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lm2lm_serve_checkpoint_copy_max_seconds", Help: "The longest a checkpoint's copy held scoring up."})
	m.reg.MustRegister(m.requests, m.latency, m.repeats, m.failures, m.completions, m.groups, m.meanReward, m.step, m.calibrations, m.evidence, m.realRuns, m.monitor,
		m.copyTime, m.copyMax)
	return m
}

// checkpointCopy records a copy that held the lock d seconds. The caller
// holds the service's mu.
func (m *metrics) checkpointCopy(d float64) {
	m.copyTime.Observe(d)
	if d > m.longest {
		m.longest = d
		m.copyMax.Set(d)
	}
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func (m *metrics) request(route string, code int) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

// scored counts one score request's completions and groups.
func (m *metrics) scored(sc loop.Scored) {
	var valid, invalid int
	for _, g := range sc.Groups {
		for _, v := range g.Valid {
			if v {
				valid++
			} else {
				invalid++
			}
		}
		if g.Kept {
			m.groups.WithLabelValues("kept").Inc()
		} else {
			m.groups.WithLabelValues("flat").Inc()
		}
	}
	m.completions.WithLabelValues("true").Add(float64(valid))
	m.completions.WithLabelValues("false").Add(float64(invalid))
	m.meanReward.Set(sc.Report.MeanReward)
}

// calibrated sets the monitors of a calibration.
func (m *metrics) calibrated(rep loop.CalibrationReport) {
	for name, v := range map[string]float64{"delta_m": rep.Monitors.Bias.Delta, "gap": rep.Monitors.Bias.Gap(),
		"advantage_cosine": rep.Monitors.Cosine, "pairwise_accuracy": rep.Monitors.Accuracy} {
		m.monitor.WithLabelValues(name).Set(v)
	}
}

// update sets the state gauges. The caller holds s.mu or owns s.
func (m *metrics) update(s *Service) {
	st := s.loop.Status()
	m.step.Set(float64(st.Step))
	m.calibrations.Set(float64(st.Calibrations))
	m.evidence.Set(float64(st.Evidence.Len()))
	m.realRuns.Set(float64(st.Runs))
}
