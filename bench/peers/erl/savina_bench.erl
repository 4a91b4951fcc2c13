%% Savina's chameneos and big in Erlang/OTP (Debian 12's erlang-base, OTP 25); thread count =
%% schedulers (erl +S T:T). The definitions, followed message for message, and the parameters:
%% bench/workloads/savina.hpp.
%%   chameneos <meetings>   a mall and 100 creatures
%%   big <pings>            1,000 workers and a sink
%% Run: erl -noshell +P 4000000 +S T:T -pa DIR -run savina_bench main <workload> <param>
%% Output: erlang-process <workload> <param> <schedulers> <seconds> result=<r>[(WRONG)]
%% Build: erlc -o DIR savina_bench.erl (bench/peers/run_savina.py does).
-module(savina_bench).
-export([main/1]).

-define(CREATURES, 100).
-define(WORKERS, 1000).

main([W, P]) ->
    Param = list_to_integer(P),
    Fun = case W of
              "chameneos" -> fun chameneos/1;
              "big" -> fun big/1
          end,
    Fun(Param div 10),
    T0 = erlang:monotonic_time(nanosecond),
    R = Fun(Param),
    S = (erlang:monotonic_time(nanosecond) - T0) / 1.0e9,
    Mark = case R of Param -> ""; _ -> "(WRONG)" end,
    io:format("erlang-process ~s ~B ~B ~.6f result=~B~s~n",
              [W, Param, erlang:system_info(schedulers_online), S, R, Mark]),
    halt(case R of Param -> 0; _ -> 1 end).

%% --- chameneos ---------------------------------------------------------------------------------
%% Colours: 0 red, 1 yellow, 2 blue, 3 faded.
complement(C, C) -> C;
complement(Mine, Other) -> 3 - Mine - Other.

chameneos(Meetings) ->
    Self = self(),
    Mall = spawn(fun() -> mall(Meetings, ?CREATURES, none, 0, 0, Self) end),
    [spawn(fun() -> creature_start(Mall, I rem 3) end) || I <- lists:seq(0, ?CREATURES - 1)],
    receive {result, R} -> R end.

%% mall(MeetingsLeft, CreaturesOpen, Waiting, Held, Reported, Main)
mall(Left, Open, Waiting, Held, Reported, Main) ->
    receive
        {report, N} ->
            case Open of
                1 ->
                    Sum = Reported + N,
                    Main ! {result, case Sum of S when S =:= 2 * Held -> Held; _ -> -Sum end};
                _ ->
                    mall(Left, Open - 1, Waiting, Held, Reported + N, Main)
            end;
        {request, _Colour, Creature} when Left =:= 0 ->
            Creature ! closed,
            mall(Left, Open, Waiting, Held, Reported, Main);
        {request, _Colour, Creature} when Waiting =:= none ->
            mall(Left, Open, Creature, Held, Reported, Main);
        {request, Colour, Creature} ->
            Waiting ! {meet, Colour, Creature},
            mall(Left - 1, Open, none, Held + 1, Reported, Main)
    end.

creature_start(Mall, Colour) ->
    Mall ! {request, Colour, self()},
    creature(Mall, Colour, 0).

creature(Mall, Colour, Meetings) ->
    receive
        {meet, OtherColour, Other} ->
            New = complement(Colour, OtherColour),
            Other ! {change, New},
            Mall ! {request, New, self()},
            creature(Mall, New, Meetings + 1);
        {change, New} ->
            Mall ! {request, New, self()},
            creature(Mall, New, Meetings + 1);
        closed ->
            Mall ! {report, Meetings}
    end.

%% --- big ---------------------------------------------------------------------------------------
big(Pings) ->
    Self = self(),
    Sink = spawn(fun() -> sink(?WORKERS, 0, Self) end),
    Workers = [spawn(fun() -> worker_start(I, share(Pings, I), Sink) end)
               || I <- lists:seq(0, ?WORKERS - 1)],
    Neighbours = list_to_tuple(Workers),
    [Wk ! {neighbours, Neighbours} || Wk <- Workers],
    [Wk ! {pong, -1} || Wk <- Workers],
    R = receive {result, V} -> V end,
    [Wk ! stop || Wk <- Workers],
    R.

share(Pings, I) when I < Pings rem ?WORKERS -> Pings div ?WORKERS + 1;
share(Pings, _) -> Pings div ?WORKERS.

sink(0, Pongs, Main) -> Main ! {result, Pongs};
sink(Left, Pongs, Main) -> receive {report, N} -> sink(Left - 1, Pongs + N, Main) end.

worker_start(Index, ToSend, Sink) ->
    receive {neighbours, Neighbours} ->
        %% state: Random (Savina's PseudoRandom, seeded with the index), Pinged, Sent, Pongs, Wrong
        worker(Index, ToSend, Sink, Neighbours, Index, -1, 0, 0, false)
    end.

worker(Index, ToSend, Sink, Ns, Random, Pinged, Sent, Pongs, Wrong) ->
    receive
        {ping, From} ->
            element(From + 1, Ns) ! {pong, Index},
            worker(Index, ToSend, Sink, Ns, Random, Pinged, Sent, Pongs, Wrong);
        {pong, From} ->
            Wrong2 = Wrong orelse From =/= Pinged,
            Pongs2 = case From of -1 -> Pongs; _ -> Pongs + 1 end,
            case Sent of
                ToSend ->
                    Sink ! {report, case Wrong2 of true -> -1; false -> Pongs2 end},
                    worker(Index, ToSend, Sink, Ns, Random, Pinged, Sent, Pongs2, Wrong2);
                _ ->
                    Random2 = (Random * 1309 + 13849) band 65535,
                    Target = Random2 rem ?WORKERS,
                    element(Target + 1, Ns) ! {ping, Index},
                    worker(Index, ToSend, Sink, Ns, Random2, Target, Sent + 1, Pongs2, Wrong2)
            end;
        stop ->
            ok
    end.
