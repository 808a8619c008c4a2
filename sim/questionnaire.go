package sim

import (
	"encoding/binary"

	"github.com/surveysync/surveysync/survey"
)

// The questionnaire of a generated survey: three pages (four with uploads)
// holding every question type the emulator produces. Its shape and texts are
// fixed per survey (from the survey's seed); answers vary per response.

type qkind int

const (
	qURL qkind = iota
	qSingle
	qSingleOther
	qMultiple
	qMatrixSingle
	qMatrixMultiple
	qScale
	qEssay
	qEssayOptional
	qFile
)

// Question type names as the emulator sends them. The spec names only
// url_parameter, single and essay; the others are our choice (docs/emulator.md).
var qTypes = map[qkind]string{
	qURL:            "url_parameter",
	qSingle:         "single",
	qSingleOther:    "single",
	qMultiple:       "multiple",
	qMatrixSingle:   "matrix_single",
	qMatrixMultiple: "matrix_multiple",
	qScale:          "scale",
	qEssay:          "essay",
	qEssayOptional:  "essay",
	qFile:           "file_upload",
}

type option struct {
	id    survey.FlexInt
	label string
	value survey.FlexInt
}

type question struct {
	id       int64
	kind     qkind
	typ      string
	title    string // empty: the service omits it
	variable string
	opts     []option // choices, or the columns of a battery
	rows     []option // battery rows
	other    int      // index of the "Other" choice in opts, or -1
}

type qpage struct {
	id        int64
	questions []*question
}

type questionnaire struct {
	pages []qpage
}

var (
	satisfactionLabels = []string{"Velmi spokojen(a)", "Spíše spokojen(a)", "Ani spokojen(a), ani nespokojen(a)", "Spíše nespokojen(a)", "Velmi nespokojen(a)"}
	sourceLabels       = []string{"Internet", "Přítel nebo známý", "Televize a rádio", "Tištěná reklama", "Jiné"}
	productLabels      = []string{"Běžný účet", "Spořicí účet", "Hypotéka", "Pojištění domácnosti", "Mobilní aplikace", "Jiné"}
	areaLabels         = []string{"Cena", "Kvalita", "Rychlost dodání", "Zákaznická podpora", "Webové stránky"}
	gradeLabels        = []string{"Výborně", "Chvalitebně", "Dobře", "Dostatečně", "Nedostatečně"}
	channelLabels      = []string{"E-shop", "Kamenná prodejna", "Telefonicky"}
	essayTexts         = []string{
		"Příliš žluťoučký kůň úpěl ďábelské ódy.",
		"Rychlejší doručení a lepší komunikaci se zákazníky.",
		"Vše v pořádku, děkuji!",
		"Cena je příliš vysoká – zvažte slevy pro stálé zákazníky.",
		"Aplikace občas spadne při platbě kartou.",
		"Text s \"uvozovkami\", zpětným lomítkem \\ a novým řádkem\nna druhém řádku.",
		"Skvělá obsluha 👍, jen parkování u prodejny je problém.",
		"Nevím.",
		"Ocenil bych delší otevírací dobu o víkendech a svátcích.",
		"Ďábelsky dobré! Čeština: ěščřžýáíéúů ĚŠČŘŽÝÁÍÉÚŮ.",
	}
	otherTexts   = []string{"Od kolegy v práci", "Na veletrhu v Brně", "Z podcastu", "Viděl jsem billboard u dálnice D1"}
	sourceValues = []string{"newsletter", "facebook", "google", "přímý-přístup", "email_kampaň"}
	campaigns    = []string{"jaro-2024", "podzim-2024", "vánoce"}
)

func options(base int64, labels []string) []option {
	out := make([]option, len(labels))
	for k, l := range labels {
		out[k] = option{id: survey.FlexInt(base + int64(k) + 1), label: l, value: survey.FlexInt(k + 1)}
	}
	return out
}

// newQuestionnaire builds the questionnaire of a survey from its key.
func newQuestionnaire(key uint64, files bool) *questionnaire {
	r := newRNG(key, 7)
	pageBase := 7000 + int64(key%1000)*10
	qid := 90000 + int64(key%1000)*100
	next := func(kind qkind, title, variable string) *question {
		qid++
		return &question{id: qid, kind: kind, typ: qTypes[kind], title: title, variable: variable, other: -1}
	}
	q1 := next(qURL, "Parametr URL", "source")
	q2 := next(qSingle, "Jak jste celkově spokojen(a) s našimi službami?", "spokojenost")
	q2.opts = options(q2.id*100, satisfactionLabels)
	q3 := next(qSingleOther, "Jak jste se o nás dozvěděl(a)?", "zdroj")
	q3.opts = options(q3.id*100, sourceLabels)
	q3.other = len(q3.opts) - 1
	q4 := next(qMultiple, "Které z našich produktů používáte?", "produkty")
	q4.opts = options(q4.id*100, productLabels)
	q4.other = len(q4.opts) - 1
	q5 := next(qMatrixSingle, "Ohodnoťte prosím následující oblasti známkou jako ve škole", "hodnoceni")
	q5.rows = options(q5.id*100, areaLabels)
	q5.opts = options(q5.id*100+50, gradeLabels)
	q6 := next(qMatrixMultiple, "Kde nakupujete jednotlivé produkty?", "kanaly")
	q6.rows = options(q6.id*100, productLabels[:4])
	q6.opts = options(q6.id*100+50, channelLabels)
	q7 := next(qScale, "Jak pravděpodobné je, že nás doporučíte známým? (0–10)", "nps")
	q7.opts = make([]option, 11)
	for v := range q7.opts {
		q7.opts[v] = option{value: survey.FlexInt(v)}
	}
	q8 := next(qEssay, "Co bychom měli zlepšit?", "zlepseni")
	q9 := next(qEssayOptional, "Máte další připomínky?", "")
	qs := []*question{q2, q3, q4, q5, q6, q7, q8}
	// The service omits some titles: the URL parameter's in half the
	// surveys, and one other question's in every survey.
	if r.intn(2) == 0 {
		q1.title = ""
	}
	qs[r.intn(len(qs))].title = ""
	q := &questionnaire{pages: []qpage{
		{id: pageBase + 1, questions: []*question{q1, q2, q3}},
		{id: pageBase + 2, questions: []*question{q4, q5, q6}},
		{id: pageBase + 3, questions: []*question{q7, q8, q9}},
	}}
	if files {
		qf := next(qFile, "Nahrajte prosím svůj životopis a případné přílohy", "prilohy")
		q.pages = append(q.pages, qpage{id: pageBase + 4, questions: []*question{qf}})
	}
	return q
}

// answer generates the url parameters and the pages of a response with
// answers on its first answered pages; later pages have questions with
// empty answers.
func (q *questionnaire) answer(seed uint64, id guid16, answered int, files bool) ([]survey.URLParameter, []survey.Page) {
	r := newRNG(seed, 0)
	var params []survey.URLParameter
	src := ""
	if r.intn(5) != 0 {
		src = sourceValues[r.intn(len(sourceValues))]
		params = append(params, survey.URLParameter{Name: "source", Value: src})
		if r.intn(2) == 0 {
			params = append(params, survey.URLParameter{Name: "campaign", Value: campaigns[r.intn(len(campaigns))]})
		}
	} else {
		params = []survey.URLParameter{}
	}
	pages := make([]survey.Page, len(q.pages))
	arena := make([]survey.Answer, 0, 32) // the most a response can have
	for p := range q.pages {
		qp := &q.pages[p]
		pages[p].ID = qp.id
		pages[p].Questions = make([]survey.Question, len(qp.questions))
		for k, qq := range qp.questions {
			out := &pages[p].Questions[k]
			out.ID, out.Type, out.Title, out.Variable = qq.id, qq.typ, qq.title, qq.variable
			start := len(arena)
			if p < answered {
				qr := newRNG(seed, uint64(qq.id))
				arena = qq.appendAnswers(arena, &qr, src, id)
			}
			out.Answers = arena[start:len(arena):len(arena)]
		}
	}
	return params, pages
}

// appendAnswers appends the answers of one question to dst (one arena per
// response saves an allocation per question).
func (q *question) appendAnswers(dst []survey.Answer, r *rng, src string, id guid16) []survey.Answer {
	choice := func(o *option) survey.Answer {
		return survey.Answer{ChoiceID: &o.id, ChoiceLabel: &o.label, Value: &o.value}
	}
	start := len(dst)
	switch q.kind {
	case qURL:
		if src == "" {
			return dst
		}
		return append(dst, survey.Answer{Text: ptr(src)})
	case qSingle:
		return append(dst, choice(&q.opts[r.intn(len(q.opts))]))
	case qSingleOther:
		k := r.intn(len(q.opts))
		a := choice(&q.opts[k])
		if k == q.other {
			a.OtherID = &q.opts[k].id
			a.Text = &otherTexts[r.intn(len(otherTexts))]
		}
		return append(dst, a)
	case qMultiple:
		for k := range q.opts {
			if r.intn(3) == 0 {
				a := survey.Answer{ChoiceID: &q.opts[k].id, ChoiceLabel: &q.opts[k].label}
				if k == q.other {
					a.OtherID = &q.opts[k].id
					a.Text = &otherTexts[r.intn(len(otherTexts))]
				}
				dst = append(dst, a)
			}
		}
		if len(dst) == start {
			dst = append(dst, survey.Answer{ChoiceID: &q.opts[0].id, ChoiceLabel: &q.opts[0].label})
		}
		return dst
	case qMatrixSingle:
		for k := range q.rows {
			if r.intn(6) == 0 { // some rows unanswered
				continue
			}
			c := &q.opts[r.intn(len(q.opts))]
			dst = append(dst, survey.Answer{RowID: &q.rows[k].id, RowLabel: &q.rows[k].label, ColumnID: &c.id, ColumnLabel: &c.label, Value: &c.value})
		}
		return dst
	case qMatrixMultiple:
		for k := range q.rows {
			for c := range q.opts {
				if r.intn(3) == 0 {
					dst = append(dst, survey.Answer{RowID: &q.rows[k].id, RowLabel: &q.rows[k].label, ColumnID: &q.opts[c].id, ColumnLabel: &q.opts[c].label})
				}
			}
		}
		return dst
	case qScale:
		return append(dst, survey.Answer{Value: &q.opts[r.intn(len(q.opts))].value})
	case qEssay:
		if r.intn(5) == 0 {
			return dst
		}
		t := &essayTexts[r.intn(len(essayTexts))]
		if r.intn(3) == 0 {
			t = ptr(*t + " " + essayTexts[r.intn(len(essayTexts))])
		}
		return append(dst, survey.Answer{Text: t})
	case qEssayOptional:
		if r.intn(4) != 0 {
			return dst
		}
		return append(dst, survey.Answer{Text: &essayTexts[r.intn(len(essayTexts))]})
	case qFile:
		n := r.intn(3)
		withFileID := id[15]&1 == 0
		for k := range n {
			fid := fileGUID(id, q.id, k)
			s := fid.String()
			a := survey.Answer{Text: &s}
			if withFileID {
				g := survey.GUID(s)
				a.FileID = &g
			}
			dst = append(dst, a)
		}
		return dst
	}
	return dst
}

// fileGUID is the id of the k-th file of upload question qid of a response.
func fileGUID(resp guid16, qid int64, k int) guid16 {
	a := binary.BigEndian.Uint64(resp[0:8])
	b := binary.BigEndian.Uint64(resp[8:16])
	r := newRNG(a, b, uint64(qid), uint64(k), 0xf11e)
	return randomGUID(r.next(), r.next())
}
