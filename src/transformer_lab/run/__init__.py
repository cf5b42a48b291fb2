"""A training run, start to end: main (compose -> resolve -> check -> build -> claim -> fit -> finish), prepare
(the checks and building before the claim), build (data, model, task), resume, fit (Lightning), loggers, launch."""
