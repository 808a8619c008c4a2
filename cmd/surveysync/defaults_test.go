package main

import (
	"testing"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/source/surveyapi"
)

// The client's defaults are the configuration's, so a zero option and an
// unset key mean the same.
func TestClientDefaultsAreTheConfigs(t *testing.T) {
	c := config.Default().API
	if c.MaxConcurrency != surveyapi.DefaultMaxConcurrency || c.MaxRetries != surveyapi.DefaultMaxRetries ||
		c.Timeout != surveyapi.DefaultTimeout || c.QuotaPause != surveyapi.DefaultQuotaPause {
		t.Errorf("api defaults: config %d %d %s %s, surveyapi %d %d %s %s",
			c.MaxConcurrency, c.MaxRetries, c.Timeout, c.QuotaPause, surveyapi.DefaultMaxConcurrency,
			surveyapi.DefaultMaxRetries, surveyapi.DefaultTimeout, surveyapi.DefaultQuotaPause)
	}
}
