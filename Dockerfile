# syntax=docker/dockerfile:1
# One image, two binaries: /manager (the entrypoint: controllers and admission webhooks) and /gatewayd (run it with
# `command: [/gatewayd]`). The build stage's `go build` line is what test/chart/dockerfile_test.go runs for real,
# flag for flag, because no Docker engine runs in CI: keep it on one line.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so that a source change does not download modules again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/modelgate/modelgate/gatewayd/version.Version=${VERSION}" -o /out/ ./cmd/manager ./cmd/gatewayd

# distroless/static: no shell, no package manager, CA certificates for upstream TLS, and a non-root user.
FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.source="https://github.com/modelgate/modelgate" \
      org.opencontainers.image.description="modelgate manager and gatewayd" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/manager /manager
COPY --from=build /out/gatewayd /gatewayd
USER 65532:65532
ENTRYPOINT ["/manager"]
