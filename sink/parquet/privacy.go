package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/pipeline/privacy"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// Privacy rules on an existing Parquet warehouse (docs/privacy.md,
// "Changing the rules on an existing warehouse"): the rules in effect are
// recorded in _state/privacy.json; ApplyPrivacy rewrites every responses
// and answers file holding a value the new rules change (a new file with
// fresh footer and page statistics, replaced atomically as erasure does),
// the feed ledger's contact entries, and removes the uploaded-files index
// rows of dropped upload questions. A file needing no change is left
// alone, and a value that already has a hash's form is not hashed again:
// a run killed midway and run again finishes the rest.

const privacyFile = "privacy.json"

// Privacy returns w.
func (w *dirWarehouse) Privacy() warehouse.PrivacyStore { return w }

// PrivacyRules reads _state/privacy.json; nil when absent, a
// *warehouse.DamagedRecordError when it is not JSON (cut short,
// zero-filled, overwritten: RecordPrivacyRules replaces it whole, so
// nothing else leaves it so).
func (w *dirWarehouse) PrivacyRules(context.Context) ([]byte, error) {
	path := filepath.Join(w.dir, stateDirName, privacyFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parquet sink: %w", err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, &warehouse.DamagedRecordError{Where: path, Err: fmt.Errorf("%d bytes, not the JSON surveysync wrote: %w", len(raw), err)}
	}
	return raw, nil
}

// RecordPrivacyRules replaces _state/privacy.json atomically.
func (w *dirWarehouse) RecordPrivacyRules(_ context.Context, rules []byte) error {
	if err := atomicfile.WriteFile(filepath.Join(w.dir, stateDirName, privacyFile), rules, 0o600); err != nil {
		return fmt.Errorf("parquet sink: record the privacy rules: %w", err)
	}
	return nil
}

// HasData reports whether a responses file exists.
func (w *dirWarehouse) HasData(context.Context) (bool, error) {
	paths, err := filepath.Glob(filepath.Join(w.dir, flatten.TableResponses, "survey_id=*", "date=*", "*.parquet"))
	return len(paths) > 0, err
}

type pqQuestion struct {
	survey, id   int64
	qtype, varbl string
}

// ApplyPrivacy rewrites the files as d says (see above).
func (w *dirWarehouse) ApplyPrivacy(ctx context.Context, d *privacy.Delta, deleteObjects func(context.Context, []files.FileRef) error) (map[string]int64, error) {
	changed := map[string]int64{}
	if d.Questions() {
		answers, err := filepath.Glob(filepath.Join(w.dir, flatten.TableAnswers, "survey_id=*", "date=*", "*.parquet"))
		if err != nil {
			return changed, err
		}
		sort.Strings(answers)
		acts := map[pqQuestion]privacy.Action{}
		action := func(q pqQuestion) privacy.Action {
			a, ok := acts[q]
			if !ok {
				a = d.Question(q.survey, q.id, q.qtype, q.varbl)
				acts[q] = a
			}
			return a
		}
		// The dropped questions' files first: the answers naming them are
		// removed after, so a run killed between finds them again.
		dropped := map[[2]int64]bool{}
		for _, p := range answers {
			if err := w.questionsOf(ctx, p, func(q pqQuestion) {
				if action(q) == privacy.Drop {
					dropped[[2]int64{q.survey, q.id}] = true
				}
			}); err != nil {
				return changed, fmt.Errorf("parquet sink: privacy apply: read %s: %w", p, err)
			}
		}
		if len(dropped) > 0 {
			n, err := w.dropFiles(ctx, dropped, deleteObjects)
			changed["objects"] += n
			changed["uploaded_files"] += n
			if err != nil {
				return changed, err
			}
		}
		for _, p := range answers {
			n, err := w.rewrite(ctx, p, nil, func(rec arrow.RecordBatch) (arrow.RecordBatch, []bool, int64, error) {
				return w.answersDelta(rec, d, action)
			})
			if err != nil {
				return changed, fmt.Errorf("parquet sink: privacy apply to %s: %w", p, err)
			}
			changed[flatten.TableAnswers] += n
		}
	}
	responses, err := filepath.Glob(filepath.Join(w.dir, flatten.TableResponses, "survey_id=*", "date=*", "*.parquet"))
	if err != nil {
		return changed, err
	}
	sort.Strings(responses)
	for _, p := range responses {
		n, err := w.rewrite(ctx, p, nil, func(rec arrow.RecordBatch) (arrow.RecordBatch, []bool, int64, error) {
			return w.responsesDelta(rec, d)
		})
		if err != nil {
			return changed, fmt.Errorf("parquet sink: privacy apply to %s: %w", p, err)
		}
		changed[flatten.TableResponses] += n
	}
	n, err := w.ledgerDelta(ctx, d)
	changed["pushed_contacts"] += n
	return changed, err
}

// dropFiles deletes the objects of the dropped questions' files, then
// their index rows.
func (w *dirWarehouse) dropFiles(ctx context.Context, dropped map[[2]int64]bool, deleteObjects func(context.Context, []files.FileRef) error) (int64, error) {
	ix, err := w.existingFileIndex()
	if err != nil || ix == nil {
		return 0, err
	}
	var refs []files.FileRef
	for _, r := range ix.All() {
		if dropped[[2]int64{r.SurveyID, r.QuestionID}] {
			refs = append(refs, r.FileRef)
		}
	}
	if len(refs) == 0 {
		return 0, nil
	}
	if deleteObjects != nil {
		if err := deleteObjects(ctx, refs); err != nil {
			return 0, err
		}
	}
	n, err := ix.Remove(func(r files.Record) bool { return dropped[[2]int64{r.SurveyID, r.QuestionID}] })
	return int64(n), err
}

// ledgerDelta applies contact_id's rule to the feed ledger.
func (w *dirWarehouse) ledgerDelta(ctx context.Context, d *privacy.Delta) (int64, error) {
	a := d.Field("contact_id")
	if a == privacy.Keep {
		return 0, nil
	}
	l, err := w.existingLedger()
	if err != nil || l == nil {
		return 0, err
	}
	return l.RewriteContacts(ctx, func(e *record.ContactEntry) (bool, bool) {
		switch a {
		case privacy.Drop:
			ch := e.ContactID != 0 || e.ContactIDHash != ""
			e.ContactID, e.ContactIDHash = 0, ""
			return ch, false
		case privacy.Clear:
			ch := e.ContactIDHash != ""
			e.ContactIDHash = ""
			return ch, false
		case privacy.Hash:
			if e.ContactID == 0 {
				return false, false
			}
			e.ContactIDHash, e.ContactID = d.HashInt(e.ContactID), 0
			return true, false
		}
		return false, false
	})
}

// questionsOf calls fn with each question an answers file names.
func (w *dirWarehouse) questionsOf(ctx context.Context, path string, fn func(pqQuestion)) error {
	seen := map[pqQuestion]bool{}
	return readColumns(ctx, w.mem, path, []string{"survey_id", "question_id", "question_type", "variable"}, func(rec arrow.RecordBatch) error {
		sids, ok1 := rec.Column(0).(*array.Int64)
		qids, ok2 := rec.Column(1).(*array.Int64)
		types, ok3 := rec.Column(2).(*array.String)
		vars, ok4 := rec.Column(3).(*array.String)
		if !(ok1 && ok2 && ok3 && ok4) {
			return errors.New("unexpected column types: not a surveysync answers file")
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			q := pqQuestion{sids.Value(i), qids.Value(i), types.Value(i), vars.Value(i)}
			if !seen[q] {
				seen[q] = true
				fn(q)
			}
		}
		return nil
	})
}

// colOf returns rec's column name (nil when the file has none).
func colOf(rec arrow.RecordBatch, name string) arrow.Array {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) != 1 {
		return nil
	}
	return rec.Column(idx[0])
}

// replace returns rec with columns replaced (or appended, as String
// columns, when rec has none of that name).
func replace(rec arrow.RecordBatch, cols map[string]arrow.Array) arrow.RecordBatch {
	fields := rec.Schema().Fields()
	arrs := make([]arrow.Array, 0, len(fields)+1)
	arrs = append(arrs, rec.Columns()...)
	for name, a := range cols {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) == 1 {
			arrs[idx[0]] = a
			continue
		}
		fields = append(fields, arrow.Field{Name: name, Type: a.DataType()})
		arrs = append(arrs, a)
	}
	md := rec.Schema().Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), arrs, rec.NumRows())
}

// stringCol builds a String column of n values.
func (w *dirWarehouse) stringCol(n int, value func(i int) string) arrow.Array {
	b := array.NewStringBuilder(w.mem)
	defer b.Release()
	b.Reserve(n)
	for i := 0; i < n; i++ {
		b.Append(value(i))
	}
	return b.NewArray()
}

func (w *dirWarehouse) nullInt64s(n int) arrow.Array {
	b := array.NewInt64Builder(w.mem)
	defer b.Release()
	b.AppendNulls(n)
	return b.NewArray()
}

// responsesDelta applies d's field rules to a responses record.
func (w *dirWarehouse) responsesDelta(rec arrow.RecordBatch, d *privacy.Delta) (arrow.RecordBatch, []bool, int64, error) {
	n := int(rec.NumRows())
	cols := map[string]arrow.Array{}
	rowChanged := make([]bool, n)
	if ip, ok := colOf(rec, "ip_address").(*array.String); ok && d.Field("ip_address") != privacy.Keep {
		a := d.Field("ip_address")
		cols["ip_address"] = w.stringCol(n, func(i int) string {
			v := ip.Value(i)
			nv := ""
			if a == privacy.Hash && v != "" {
				nv = d.Hash(v)
			}
			if nv != v {
				rowChanged[i] = true
			}
			return nv
		})
	}
	if dist, ok := colOf(rec, "distribution_id").(*array.Int64); ok && d.Field("distribution_id") == privacy.Drop && dist.NullN() < n {
		for i := 0; i < n; i++ {
			if dist.IsValid(i) {
				rowChanged[i] = true
			}
		}
		cols["distribution_id"] = w.nullInt64s(n)
	}
	if a := d.Field("contact_id"); a != privacy.Keep {
		ids, _ := colOf(rec, "contact_id").(*array.Int64)
		hashes, _ := colOf(rec, "contact_id_hash").(*array.String)
		if ids == nil {
			return nil, nil, 0, errors.New("no contact_id column: not a surveysync responses file")
		}
		cols["contact_id_hash"] = w.stringCol(n, func(i int) string {
			old := ""
			if hashes != nil {
				old = hashes.Value(i)
			}
			nv := old
			switch {
			case a == privacy.Hash && ids.IsValid(i):
				nv = d.HashInt(ids.Value(i))
			case a == privacy.Drop || a == privacy.Clear:
				nv = ""
			}
			if nv != old || (a != privacy.Clear && ids.IsValid(i)) {
				rowChanged[i] = true
			}
			return nv
		})
		if a != privacy.Clear {
			cols["contact_id"] = w.nullInt64s(n)
		}
	}
	if d.Params() {
		names, ok1 := colOf(rec, "url_parameters.name").(*array.List)
		values, ok2 := colOf(rec, "url_parameters.value").(*array.List)
		if !(ok1 && ok2) {
			return nil, nil, 0, errors.New("no url_parameters columns: not a surveysync responses file")
		}
		nb, vb := array.NewListBuilder(w.mem, arrow.BinaryTypes.String), array.NewListBuilder(w.mem, arrow.BinaryTypes.String)
		defer nb.Release()
		defer vb.Release()
		nvb, vvb := nb.ValueBuilder().(*array.StringBuilder), vb.ValueBuilder().(*array.StringBuilder)
		nstr, _ := names.ListValues().(*array.String)
		vstr, _ := values.ListValues().(*array.String)
		if nstr == nil || vstr == nil {
			return nil, nil, 0, errors.New("url_parameters are not lists of strings: not a surveysync responses file")
		}
		for i := 0; i < n; i++ {
			nb.Append(true)
			vb.Append(true)
			s, e := names.ValueOffsets(i)
			vs, _ := values.ValueOffsets(i)
			for j := s; j < e; j++ {
				name, v := nstr.Value(int(j)), vstr.Value(int(vs+(j-s)))
				switch d.Param(name) {
				case privacy.Drop:
					rowChanged[i] = true
					continue
				case privacy.Clear:
					if v != "" {
						rowChanged[i], v = true, ""
					}
				case privacy.Hash:
					if h := d.Hash(v); h != v {
						rowChanged[i], v = true, h
					}
				}
				nvb.Append(name)
				vvb.Append(v)
			}
		}
		cols["url_parameters.name"], cols["url_parameters.value"] = nb.NewArray(), vb.NewArray()
	}
	var changed int64
	for _, c := range rowChanged {
		if c {
			changed++
		}
	}
	if changed == 0 {
		for _, a := range cols {
			a.Release()
		}
		rec.Retain()
		return rec, nil, 0, nil
	}
	out := replace(rec, cols)
	for _, a := range cols {
		a.Release()
	}
	return out, nil, changed, nil
}

// answersDelta applies d's question rules to an answers record: rows of
// dropped questions are not kept; hashed ones get text hashed (else the
// value's decimal, value emptied), cleared ones an empty text.
func (w *dirWarehouse) answersDelta(rec arrow.RecordBatch, d *privacy.Delta, action func(pqQuestion) privacy.Action) (arrow.RecordBatch, []bool, int64, error) {
	n := int(rec.NumRows())
	sids, ok1 := colOf(rec, "survey_id").(*array.Int64)
	qids, ok2 := colOf(rec, "question_id").(*array.Int64)
	types, ok3 := colOf(rec, "question_type").(*array.String)
	vars, ok4 := colOf(rec, "variable").(*array.String)
	texts, ok5 := colOf(rec, "text").(*array.String)
	values, ok6 := colOf(rec, "value").(*array.Int64)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return nil, nil, 0, errors.New("unexpected columns: not a surveysync answers file")
	}
	keep := make([]bool, n)
	var changed int64
	tb := array.NewStringBuilder(w.mem)
	defer tb.Release()
	vb := array.NewInt64Builder(w.mem)
	defer vb.Release()
	for i := 0; i < n; i++ {
		keep[i] = true
		text := texts.Value(i)
		valid := values.IsValid(i)
		var value int64
		if valid {
			value = values.Value(i)
		}
		switch action(pqQuestion{sids.Value(i), qids.Value(i), types.Value(i), vars.Value(i)}) {
		case privacy.Drop:
			keep[i] = false
			changed++
		case privacy.Clear:
			if text != "" {
				text = ""
				changed++
			}
		case privacy.Hash:
			nt := text
			switch {
			case text != "":
				nt = d.Hash(text)
			case valid:
				nt = d.HashInt(value)
			}
			if nt != text || valid {
				changed++
			}
			text, valid = nt, false
		}
		tb.Append(text)
		if valid {
			vb.Append(value)
		} else {
			vb.AppendNull()
		}
	}
	if changed == 0 {
		rec.Retain()
		return rec, nil, 0, nil
	}
	ta, va := tb.NewArray(), vb.NewArray()
	defer ta.Release()
	defer va.Release()
	return replace(rec, map[string]arrow.Array{"text": ta, "value": va}), keep, changed, nil
}
