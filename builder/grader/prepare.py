# Builds the grader's embedded tasks from datasets that scikit-learn ships
# inside its package (no download). Started as
#   python3 -I -c <this file> <out dir> <name>...
# For each task it writes <out>/<name>/{train.csv,test.csv,answers.csv} and,
# for each reference solution, <out>/<name>/ref-<solution>.csv: the
# reference's predictions for the test rows, which the grader scores into
# the leaderboard, and <out>/<name>/hide.txt: the directory of scikit-learn's
# bundled datasets, which runs must not see. The split is a fixed
# permutation (seed 0), a quarter of the rows held out. Answers and
# reference predictions are readable by their owner only.
import csv
import os
import sys

import numpy as np
from sklearn import datasets, dummy, ensemble, linear_model, neighbors, pipeline, preprocessing, tree

out, names = sys.argv[1], sys.argv[2:]

LOADERS = {
    "iris": (datasets.load_iris, "classification"),
    "wine": (datasets.load_wine, "classification"),
    "breast-cancer": (datasets.load_breast_cancer, "classification"),
    "diabetes": (datasets.load_diabetes, "regression"),
    "digits": (datasets.load_digits, "classification"),
}


def scaled(model):
    return pipeline.make_pipeline(preprocessing.StandardScaler(), model)


# Reference solutions of increasing quality.
REFERENCES = {
    "classification": [
        ("majority", lambda: dummy.DummyClassifier(strategy="most_frequent")),
        ("stump", lambda: tree.DecisionTreeClassifier(max_depth=1, random_state=0)),
        ("knn", lambda: scaled(neighbors.KNeighborsClassifier(n_neighbors=15))),
        ("logistic", lambda: scaled(linear_model.LogisticRegression(max_iter=2000))),
        ("forest", lambda: ensemble.RandomForestClassifier(n_estimators=200, random_state=0)),
    ],
    "regression": [
        ("mean", lambda: dummy.DummyRegressor(strategy="mean")),
        ("stump", lambda: tree.DecisionTreeRegressor(max_depth=1, random_state=0)),
        ("knn", lambda: scaled(neighbors.KNeighborsRegressor(n_neighbors=15))),
        ("ridge", lambda: linear_model.Ridge(alpha=0.1)),
    ],
}


def write(path, header, rows, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)
    with open(fd, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def num(v):
    return repr(float(v)) if isinstance(v, (float, np.floating)) else str(v)


for name in names:
    load, kind = LOADERS[name]
    X, y = load(return_X_y=True)
    perm = np.random.RandomState(0).permutation(len(y))
    n_test = len(y) // 4
    test, train = perm[:n_test], perm[n_test:]
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cols = ["f%d" % i for i in range(X.shape[1])]
    write(os.path.join(d, "train.csv"), ["id"] + cols + ["target"],
          [[int(i)] + [num(v) for v in X[i]] + [num(y[i])] for i in train])
    write(os.path.join(d, "test.csv"), ["id"] + cols, [[int(i)] + [num(v) for v in X[i]] for i in test])
    write(os.path.join(d, "answers.csv"), ["id", "target"], [[int(i), num(y[i])] for i in test], 0o600)
    with open(os.path.join(d, "hide.txt"), "w") as f:
        f.write(os.path.join(os.path.dirname(os.path.abspath(datasets.__file__)), "data") + "\n")
    for ref, make in REFERENCES[kind]:
        pred = make().fit(X[train], y[train]).predict(X[test])
        write(os.path.join(d, "ref-%s.csv" % ref), ["id", "target"], [[int(i), num(p)] for i, p in zip(test, pred)], 0o600)
