module github.com/flyballhq/flyball/loadtest

go 1.26.0

replace (
	github.com/flyballhq/flyball/pkg => ../pkg
	github.com/flyballhq/flyball/services => ../services
	github.com/flyballhq/flyball/streams => ../streams
)
