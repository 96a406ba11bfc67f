#!/usr/bin/env sh
# Spark needs Java 17 or newer; say so plainly instead of failing deep inside py4j.
if ! command -v java >/dev/null 2>&1; then
  echo "error: no 'java' on PATH; Spark (pyspark >= 4) needs Java 17+ (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ -z "$v" ] || [ "$v" -lt 17 ]; then
  echo "error: Java ${v:-unknown} found; Spark needs Java 17+" >&2
  exit 1
fi
