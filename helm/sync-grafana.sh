#!/bin/sh
# Copy the dashboards and alert rules from grafana/ into the chart: Helm reads only files inside the chart
# directory (a symlink does not survive `helm package`). tests/helm checks the copies are byte-identical.
set -eu
root="$(cd "$(dirname "$0")/.." && pwd)"
chart="$root/helm/streamgate"
mkdir -p "$chart/dashboards" "$chart/alerts"
rm -f "$chart"/dashboards/*.json "$chart"/alerts/*.rules.yml
cp "$root"/grafana/dashboards/*.json "$chart/dashboards/"
cp "$root"/grafana/alerts/*.rules.yml "$chart/alerts/"
echo "copied: $(ls "$chart/dashboards" "$chart/alerts" | grep -c '\.')"
