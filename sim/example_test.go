package sim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// A test starts the emulator on a fixed clock behind a loopback server and
// reads the first page of completed responses, as surveysync does.
func Example() {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	s, err := sim.New(sim.Options{
		Token:   "test-token",
		Now:     func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: 4574, Name: "Spokojenost zákazníků", Responses: 1000, Seed: 7}},
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/v1/surveys/4574/responses?per_page=2", nil)
	req.Header.Set("X-API-TOKEN", "test-token")
	resp, err := srv.Client().Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var body struct {
		Result survey.ResponseList `json:"result"`
	}
	json.NewDecoder(resp.Body).Decode(&body)

	truth, _ := s.Response(4574, body.Result.Data[0].ResponseID)
	fmt.Println(resp.StatusCode, len(body.Result.Data), truth.ResponseStatus, truth.SurveyName)
	// Output: 200 2 completed Spokojenost zákazníků
}
