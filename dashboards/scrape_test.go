package dashboards

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"
)

// BenchmarkScrape100Surveys measures the scrape cost of a daemon polling 100
// surveys (the built-in emulator's, 40 responses each, every status, so
// every per-survey series exists) with webhooks, file copies and a feed on,
// and ClickHouse when SURVEYSYNC_TEST_CLICKHOUSE_ADDR is set: one op is one
// GET /metrics over loopback (render + transfer, uncompressed as
// text/plain). It reports the page size and its gzip size (what Prometheus
// transfers, as it asks for gzip).
//
//	go test -run '^$' -bench Scrape100 -benchtime 200x ./dashboards/
func BenchmarkScrape100Surveys(b *testing.B) {
	bin := daemonBinary(b)
	dir := b.TempDir()
	setup := daemonSetup{surveys: 100, responses: 40, metricsListen: freeAddr(b), webhooks: true, feed: true, files: true, pollInterval: "30s"}
	if addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR"); addr != "" {
		setup.clickhouseAddr, setup.clickhouseDB = addr, "test_dashboards_"+randHex(6)
		b.Cleanup(func() { dropDatabase(b, addr, setup.clickhouseDB) })
	}
	cfg, _ := writeDaemonConfig(b, dir, setup)
	d := startProc(b, "surveysync", exec.Command(bin, "run", "--config", cfg))
	url := "http://" + setup.metricsListen + "/metrics"
	waitFor(b, "every stream polled and every survey written", 5*time.Minute, d, func() bool {
		code, body, err := httpGet(url)
		if err != nil || code != 200 {
			return false
		}
		e := parseExposition(body)
		return len(e.samples["surveysync_poll_watermark_timestamp_seconds"]) == 4*setup.surveys &&
			len(e.samples["surveysync_pipeline_newest_response_timestamp_seconds"]) >= 3*setup.surveys
	})
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var size int
	var page []byte
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		page, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(start))
		size = len(page)
	}
	b.StopTimer()
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(page)
	_ = w.Close()
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	e := parseExposition(page)
	series := 0
	for _, s := range e.samples {
		series += len(s)
	}
	type famSize struct {
		name         string
		series, size int
	}
	var fams []famSize
	for name, lines := range e.samples {
		f := famSize{name: name, series: len(lines)}
		for _, l := range lines {
			f.size += len(l) + 1
		}
		fams = append(fams, f)
	}
	sort.Slice(fams, func(i, j int) bool { return fams[i].size > fams[j].size })
	for _, f := range fams[:min(8, len(fams))] {
		b.Logf("%-60s %5d series %7d bytes", f.name, f.series, f.size)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
	b.ReportMetric(float64(gz.Len()), "gzip-bytes/scrape")
	b.ReportMetric(float64(series), "series")
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds())/1000, "p99-ms")
}
