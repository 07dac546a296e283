package main

// Solution is one candidate solution of the scripted proposer: plain
// Python (csv and math only, so it starts fast) for any classification
// task of builder/grader (train.csv: id, features, target; test.csv: id,
// features). Together they span the ladder (METHOD.md §2).
type Solution struct {
	Name, Code string
}

const readData = `import csv, math
train = list(csv.DictReader(open('train.csv')))
test = list(csv.DictReader(open('test.csv')))
feats = [k for k in test[0] if k != 'id']
def vec(r):
    return [float(r[k]) for k in feats]
`

const writeSub = `with open('submission.csv', 'w') as f:
    f.write('id,target\n')
    for r, p in zip(test, preds):
        f.write('%s,%s\n' % (r['id'], p))
`

// Solutions returns the scripted proposer's solutions, roughly worst to
// best.
func Solutions() []Solution {
	return []Solution{
		{"typo", readData + "preds = [train[0]['target'] for r in test\n" + writeSub},
		{"wrong-column", readData + "preds = [r['label'] for r in test]\n" + writeSub},
		{"memory-hog", readData + "cache = bytearray(8 << 30)\npreds = ['0' for r in test]\n" + writeSub},
		{"forgot-submission", readData + "preds = [train[0]['target'] for r in test]\nprint(len(preds), 'predictions')\n"},
		{"majority", readData + `counts = {}
for r in train:
    counts[r['target']] = counts.get(r['target'], 0) + 1
top = max(sorted(counts), key=counts.get)
preds = [top for r in test]
` + writeSub},
		{"one-feature", readData + `# nearest class mean along the feature with the widest spread of class means
means = {}
for j in range(len(feats)):
    by = {}
    for r in train:
        by.setdefault(r['target'], []).append(vec(r)[j])
    means[j] = {c: sum(v) / len(v) for c, v in by.items()}
best = max(means, key=lambda j: max(means[j].values()) - min(means[j].values()))
preds = [min(sorted(means[best]), key=lambda c: abs(vec(r)[best] - means[best][c])) for r in test]
` + writeSub},
		{"centroid", readData + `# nearest standardised class centroid
cols = list(zip(*[vec(r) for r in train]))
mu = [sum(c) / len(c) for c in cols]
sd = [max(1e-9, math.sqrt(sum((x - m) ** 2 for x in c) / len(c))) for c, m in zip(cols, mu)]
def z(v):
    return [(x - m) / s for x, m, s in zip(v, mu, sd)]
cent = {}
for r in train:
    cent.setdefault(r['target'], []).append(z(vec(r)))
cent = {c: [sum(x) / len(x) for x in zip(*v)] for c, v in cent.items()}
def d(a, b):
    return sum((x - y) ** 2 for x, y in zip(a, b))
preds = [min(sorted(cent), key=lambda c: d(z(vec(r)), cent[c])) for r in test]
` + writeSub},
		{"3-nn", readData + `# three nearest standardised neighbours, majority vote
cols = list(zip(*[vec(r) for r in train]))
mu = [sum(c) / len(c) for c in cols]
sd = [max(1e-9, math.sqrt(sum((x - m) ** 2 for x in c) / len(c))) for c, m in zip(cols, mu)]
def z(v):
    return [(x - m) / s for x, m, s in zip(v, mu, sd)]
pts = [(z(vec(r)), r['target']) for r in train]
preds = []
for r in test:
    q = z(vec(r))
    near = sorted(pts, key=lambda p: sum((x - y) ** 2 for x, y in zip(p[0], q)))[:3]
    votes = {}
    for _, c in near:
        votes[c] = votes.get(c, 0) + 1
    preds.append(max(sorted(votes), key=votes.get))
` + writeSub},
	}
}
